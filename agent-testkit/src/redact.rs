//! Keeps credentials out of `Debug` output and logs.

/// Header names whose values are credentials.
const SECRET_HEADERS: [&str; 4] = ["authorization", "proxy-authorization", "x-api-key", "cookie"];

/// Whether the header `name` (any case) carries a credential.
pub(crate) fn is_secret_header(name: &str) -> bool {
    SECRET_HEADERS.iter().any(|secret| secret.eq_ignore_ascii_case(name))
}

/// The value to show for header `name`: the value itself, or a placeholder for credentials.
pub(crate) fn header_value<'a>(name: &str, value: &'a str) -> &'a str {
    if is_secret_header(name) { "<redacted>" } else { value }
}

/// Headers with credential values replaced, for `Debug` and logs.
pub(crate) fn headers(headers: &[(String, String)]) -> Vec<(&str, &str)> {
    headers.iter().map(|(name, value)| (name.as_str(), header_value(name, value))).collect()
}
