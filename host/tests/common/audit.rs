//! The API server's audit log, to see which requests a ServiceAccount made and which were refused.

use std::path::{Path, PathBuf};

use kubewasm_testenv::ControlPlane;

use super::examples::{crd_established, deploy_dir};

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

/// A control plane auditing [`SA_USER`] into `dir/audit.log`, with the examples overlay applied
/// and its CRD established: where the deploy and image tests run the host as the overlay's
/// ServiceAccount. Returns it and the log's path.
pub async fn examples_cluster(dir: &Path) -> (ControlPlane, PathBuf) {
    let (policy, log) = (dir.join("audit-policy.yaml"), dir.join("audit.log"));
    std::fs::write(&policy, AUDIT_POLICY).unwrap();
    let cp = ControlPlane::builder()
        .apiserver_arg(format!("--audit-policy-file={}", policy.display()))
        .apiserver_arg(format!("--audit-log-path={}", log.display()))
        .start()
        .expect("a control plane with an audit log (needs `make control-plane`)");
    let mut apply = cp.kubectl();
    apply.args(["apply", "--server-side", "-k"]).arg(deploy_dir().join("overlays/examples"));
    super::run_ok(apply);
    crd_established(&cp.admin_client().await, "configmapsyncs.examples.kubewasm.dev").await;
    (cp, log)
}
