//! `mcp-echo`: a minimal MCP server on stdio (newline-delimited JSON-RPC) with one tool, `echo`,
//! that answers `echo: <text>`. Provider tests configure it as a session's MCP server to check
//! that the CLI connected it and that its tool is callable.
//!
//! With `MCP_ECHO_PREFIX` set, answers start with that text instead of `echo: `, and with the
//! arguments `--suffix TEXT` they end with `TEXT`, so a test can see that a variable and an
//! argument reached the server.

use std::io::{BufRead, Write};

use serde_json::{Value, json};

fn main() {
    let prefix = std::env::var("MCP_ECHO_PREFIX").unwrap_or_else(|_| "echo: ".to_owned());
    let args: Vec<String> = std::env::args().skip(1).collect();
    let suffix = match args.as_slice() {
        [flag, suffix] if flag == "--suffix" => suffix.clone(),
        _ => String::new(),
    };
    let stdin = std::io::stdin();
    let mut stdout = std::io::stdout().lock();
    for line in stdin.lock().lines() {
        let Ok(line) = line else { break };
        let Ok(message) = serde_json::from_str::<Value>(line.trim()) else { continue };
        let Some(id) = message.get("id").cloned() else { continue };
        let result = match message["method"].as_str() {
            Some("initialize") => json!({
                "protocolVersion": message["params"]["protocolVersion"].as_str().unwrap_or("2025-06-18"),
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "echo", "version": "0.0.1"},
            }),
            Some("tools/list") => json!({"tools": [{
                "name": "echo",
                "description": "Echo text back",
                "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
            }]}),
            Some("tools/call") => {
                let text = message["params"]["arguments"]["text"].as_str().unwrap_or_default();
                json!({"content": [{"type": "text", "text": format!("{prefix}{text}{suffix}")}]})
            }
            other => {
                let error = json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32601, "message": format!("no method {other:?}")}});
                let _ = writeln!(stdout, "{error}");
                let _ = stdout.flush();
                continue;
            }
        };
        let _ = writeln!(stdout, "{}", json!({"jsonrpc": "2.0", "id": id, "result": result}));
        let _ = stdout.flush();
    }
}
