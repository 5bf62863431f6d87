//! The `fake-model` binary: serves a scenario file, logs requests, rejects bad scripts.

mod support;

use std::path::PathBuf;
use std::process::Stdio;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

fn script(name: &str, text: &str) -> PathBuf {
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}-{}.jsonl", std::process::id()));
    std::fs::write(&path, text).unwrap();
    path
}

#[tokio::test]
async fn serves_a_script_and_logs_each_request() {
    let path = script("serve", "# greet\n{\"step\": \"text\", \"text\": \"hi from the script\"}\n");
    let mut child = Command::new(env!("CARGO_BIN_EXE_fake-model"))
        .arg(&path)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
    let port_line = stdout.next_line().await.unwrap().unwrap();
    let port: u16 = port_line.strip_prefix("port ").unwrap().parse().unwrap();
    let proxy_line = stdout.next_line().await.unwrap().unwrap();
    assert!(proxy_line.starts_with("proxy http://127.0.0.1:"), "{proxy_line}");

    let body = json!({"model": "m", "stream": true, "messages": [{"role": "user", "content": "hello"}]});
    let response = support::request(([127, 0, 0, 1], port).into(), "POST", "/v1/chat/completions", Some(&body)).await;
    assert_eq!(response.status, 200);
    let text: String = response
        .sse_json()
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(text, "hi from the script");

    let mut stderr = BufReader::new(child.stderr.take().unwrap()).lines();
    let logged: Value = serde_json::from_str(&stderr.next_line().await.unwrap().unwrap()).unwrap();
    assert_eq!(logged["endpoint"], "chat_completions");
    assert_eq!(logged["step"], 0);
    assert_eq!(logged["headers"]["x-api-key"], "<redacted>");
    assert_eq!(logged["body"]["messages"][0]["content"], "hello");
    child.kill().await.unwrap();
}

#[tokio::test]
async fn rejects_a_bad_script_naming_the_line() {
    let path = script("bad", "{\"step\": \"text\", \"text\": \"ok\"}\n{\"step\": \"moonwalk\"}\n");
    let output = Command::new(env!("CARGO_BIN_EXE_fake-model")).arg(&path).output().await.unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("scenario line 2: unknown step \"moonwalk\""), "{stderr}");

    let path = script("not-json", "{\"step\": \"text\", \"text\": \"ok\"}\n\n{\"step\": \n");
    let output = Command::new(env!("CARGO_BIN_EXE_fake-model")).arg(&path).output().await.unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("scenario line 3: not valid JSON"), "{stderr}");
}
