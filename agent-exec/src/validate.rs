//! Checks every exec backend runs before spawning, and the child environment they build.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};

use agent_core::SessionId;
use agent_core::exec::{
    Command, EnvSpec, ExecError, HARNESS_MARKER_ENV, OWNER_MARKER_ENV, OWNER_NAMESPACE_MARKER_ENV, SESSION_MARKER_ENV,
    pid_namespace,
};

/// A child's environment, sorted by name.
pub(crate) type Env = BTreeMap<OsString, OsString>;

/// Checks the parts of `command` that need no filesystem: the program is present, no argument
/// holds a NUL byte, and every environment name and value is usable.
pub(crate) fn check_command(command: &Command) -> Result<(), ExecError> {
    if command.program.is_empty() {
        return Err(ExecError::EmptyArgv);
    }
    if has_nul(&command.program) {
        return Err(ExecError::ProgramNotFound { program: command.program.clone(), searched_path: false });
    }
    if let Some(index) = command.args.iter().position(|arg| has_nul(arg)) {
        return Err(ExecError::InvalidArg { index });
    }
    check_env(&command.env)
}

fn check_env(env: &EnvSpec) -> Result<(), ExecError> {
    let names = env.allow.iter().chain(env.set.iter().map(|(key, _)| key)).chain(&env.unset);
    for key in names {
        if let Some(reason) = key_problem(key) {
            return Err(ExecError::InvalidEnv { key: key.clone(), reason });
        }
    }
    match env.set.iter().find(|(_, value)| has_nul(value)) {
        Some((key, _)) => Err(ExecError::InvalidEnv { key: key.clone(), reason: "value contains a NUL byte" }),
        None => Ok(()),
    }
}

fn key_problem(key: &OsStr) -> Option<&'static str> {
    let bytes = key.as_encoded_bytes();
    if bytes.is_empty() {
        Some("name is empty")
    } else if bytes.contains(&0) {
        Some("name contains a NUL byte")
    } else if bytes.contains(&b'=') {
        Some("name contains '='")
    } else {
        None
    }
}

fn has_nul(value: &OsStr) -> bool {
    value.as_encoded_bytes().contains(&0)
}

/// Builds the child's environment from the host's: `clear` keeps only the `allow`ed names, then
/// `set` and `unset` apply, then the markers are stamped last so a command cannot forge them. A
/// command without a session loses any session marker it inherited.
pub(crate) fn child_env(
    spec: &EnvSpec,
    session: Option<&SessionId>,
    harness: Option<u64>,
    host: impl Iterator<Item = (OsString, OsString)>,
) -> Env {
    let mut env: Env =
        if spec.clear { host.filter(|(key, _)| spec.allow.contains(key)).collect() } else { host.collect() };
    env.extend(spec.set.iter().cloned());
    for key in &spec.unset {
        env.remove(key);
    }
    match session {
        Some(session) => env.insert(SESSION_MARKER_ENV.into(), session.as_str().into()),
        None => env.remove(OsStr::new(SESSION_MARKER_ENV)),
    };
    match harness {
        Some(harness) => env.insert(HARNESS_MARKER_ENV.into(), harness.to_string().into()),
        None => env.remove(OsStr::new(HARNESS_MARKER_ENV)),
    };
    env.insert(OWNER_MARKER_ENV.into(), std::process::id().to_string().into());
    match pid_namespace() {
        Some(namespace) => env.insert(OWNER_NAMESPACE_MARKER_ENV.into(), namespace.into()),
        None => env.remove(OsStr::new(OWNER_NAMESPACE_MARKER_ENV)),
    };
    env
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host() -> impl Iterator<Item = (OsString, OsString)> {
        [("HOME", "/home/u"), ("PATH", "/bin"), (SESSION_MARKER_ENV, "inherited")]
            .into_iter()
            .map(|(k, v)| (OsString::from(k), OsString::from(v)))
    }

    #[track_caller]
    fn check_rejects(command: Command, expected: &str) {
        let error = check_command(&command).expect_err("must be rejected");
        assert_eq!(error.to_string(), expected);
    }

    #[test]
    fn bad_input_is_named() {
        check_rejects(Command::new(""), "empty argv: no program to run");
        check_rejects(Command::new("a\0b"), "program \"a\\0b\" not found");
        check_rejects(Command::new("sh").arg("ok").arg("b\0d"), "argument 1 contains a NUL byte");
        check_rejects(Command::new("sh").env("A=B", "1"), "invalid environment variable \"A=B\": name contains '='");
        check_rejects(Command::new("sh").env("", "1"), "invalid environment variable \"\": name is empty");
        check_rejects(
            Command::new("sh").env("A\0", "1"),
            "invalid environment variable \"A\\0\": name contains a NUL byte",
        );
        check_rejects(
            Command::new("sh").env("A", "x\0y"),
            "invalid environment variable \"A\": value contains a NUL byte",
        );
        check_rejects(Command::new("sh").env_remove("B=C"), "invalid environment variable \"B=C\": name contains '='");
        check_rejects(Command::new("sh").env_clear(["P=Q"]), "invalid environment variable \"P=Q\": name contains '='");
        assert!(check_command(&Command::new("sh").arg("").env("A", "")).is_ok());
    }

    #[test]
    fn env_applies_clear_allow_set_unset_then_markers() {
        let spec = Command::new("x").env_clear(["PATH"]).env("A", "1").env("B", "2").env_remove("B").env;
        let session = SessionId::new("s-1").expect("valid");
        let env = child_env(&spec, Some(&session), Some(7), host());
        let owner = std::process::id().to_string();
        let expected: Vec<(&str, &str)> = vec![
            ("A", "1"),
            (SESSION_MARKER_ENV, "s-1"),
            (HARNESS_MARKER_ENV, "7"),
            (OWNER_MARKER_ENV, &owner),
            (OWNER_NAMESPACE_MARKER_ENV, pid_namespace().expect("this process's PID namespace")),
            ("PATH", "/bin"),
        ];
        let expected: Env = expected.into_iter().map(|(k, v)| (k.into(), v.into())).collect();
        assert_eq!(env, expected);
    }

    #[test]
    fn markers_cannot_be_forged_and_stale_session_is_dropped() {
        let spec = Command::new("x")
            .env(OWNER_MARKER_ENV, "1")
            .env(SESSION_MARKER_ENV, "forged")
            .env(HARNESS_MARKER_ENV, "9")
            .env(OWNER_NAMESPACE_MARKER_ENV, "1")
            .env;
        let env = child_env(&spec, None, None, host());
        assert_eq!(env.get(OsStr::new(HARNESS_MARKER_ENV)), None);
        assert_eq!(env.get(OsStr::new(OWNER_MARKER_ENV)), Some(&OsString::from(std::process::id().to_string())));
        assert_eq!(env.get(OsStr::new(SESSION_MARKER_ENV)), None);
        let namespace = pid_namespace().expect("this process's PID namespace");
        assert_eq!(env.get(OsStr::new(OWNER_NAMESPACE_MARKER_ENV)), Some(&OsString::from(namespace)));
        assert_eq!(env.get(OsStr::new("HOME")), Some(&OsString::from("/home/u")));
    }
}
