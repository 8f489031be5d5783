//! The API server's audit log, to see which requests a ServiceAccount made and which were refused.

use std::path::Path;

/// The user the examples overlay's ServiceAccount authenticates as.
pub const SA_USER: &str = "system:serviceaccount:kubewasm-system:kubewasm";

/// An audit policy: metadata (who, what, response code) of every request by [`SA_USER`].
pub const AUDIT_POLICY: &str = "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\nrules:\n\
- level: Metadata\n  users: [\"system:serviceaccount:kubewasm-system:kubewasm\"]\n- level: None\n";

/// Audit events of [`SA_USER`] (one JSON object per line).
pub fn audit_events(log: &Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|e| e.pointer("/user/username").and_then(|u| u.as_str()) == Some(SA_USER))
        .collect()
}

/// The response code of an audit event.
pub fn code(event: &serde_json::Value) -> Option<i64> {
    event.pointer("/responseStatus/code").and_then(serde_json::Value::as_i64)
}

/// One line per event: verb, group/resource/subresource, URI and response code.
pub fn describe(event: &serde_json::Value) -> String {
    let field = |p: &str| event.pointer(p).and_then(|v| v.as_str()).unwrap_or("").to_owned();
    format!(
        "{} {}/{}/{} {} -> {:?}",
        field("/verb"),
        field("/objectRef/apiGroup"),
        field("/objectRef/resource"),
        field("/objectRef/subresource"),
        field("/requestURI"),
        code(event)
    )
}
