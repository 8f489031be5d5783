//! The API server's audit log, read as it grows: the controller's requests by verb and the
//! time of its last write, which is when it settled.
//!
//! Audit events name the user, so the bench's own requests (made as another user) and the API
//! server's loopback requests are not counted, which `apiserver_request_total` cannot tell apart.

use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use k8s_openapi::jiff::Timestamp;
use serde_json::Value;

/// Audit policy: every request of `user` at level Metadata (verb, resource, user, timestamps,
/// no bodies), nothing else.
pub fn policy(user: &str) -> String {
    format!(
        "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\nrules:\n\
         - level: Metadata\n  users: [\"{user}\"]\n- level: None\n"
    )
}

/// The kube-apiserver flags that write the audit log to `log` with `policy_file`'s policy.
/// Blocking mode (the log backend's default): an event is written before its response is sent,
/// so the log is current whenever it is read.
pub fn apiserver_args(policy_file: &Path, log: &Path) -> [String; 3] {
    [
        format!("--audit-policy-file={}", policy_file.display()),
        format!("--audit-log-path={}", log.display()),
        "--audit-log-mode=blocking".to_owned(),
    ]
}

/// Verbs that change state.
const WRITES: [&str; 5] = ["create", "update", "patch", "delete", "deletecollection"];

/// Whether `verb` changes state.
pub fn is_write(verb: &str) -> bool {
    WRITES.contains(&verb)
}

/// The audit log from one offset on: requests counted since `since`.
pub struct AuditTail {
    path: PathBuf,
    offset: u64,
    partial: Vec<u8>,
    since: Timestamp,
    /// Requests by verb (`patch` includes server-side apply).
    pub requests: BTreeMap<String, u64>,
    /// Requests by `verb resource`.
    pub by_resource: BTreeMap<String, u64>,
    /// When the last write counted was answered (its `stageTimestamp`).
    pub last_write: Option<Timestamp>,
    /// Seconds the API server spent on the applies (`patch`) counted, from receiving each to
    /// answering it. A reconcile applies its children one after the other, so for a single
    /// worker this is time on the converge's critical path that no controller can save.
    pub apply_seconds: f64,
}

impl AuditTail {
    /// Counts requests received at or after `since` from the log at `path`.
    pub fn new(path: &Path, since: Timestamp) -> Self {
        Self {
            path: path.to_owned(),
            offset: 0,
            partial: Vec::new(),
            since,
            requests: BTreeMap::new(),
            by_resource: BTreeMap::new(),
            last_write: None,
            apply_seconds: 0.0,
        }
    }

    /// Reads what was appended since the last call.
    pub fn poll(&mut self) {
        let Ok(mut file) = std::fs::File::open(&self.path) else { return };
        let mut bytes = Vec::new();
        if file.seek(SeekFrom::Start(self.offset)).is_err() || file.read_to_end(&mut bytes).is_err() {
            return;
        }
        self.offset += bytes.len() as u64;
        self.partial.extend_from_slice(&bytes);
        let complete = self.partial.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
        let lines: Vec<u8> = self.partial.drain(..complete).collect();
        for line in lines.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
            if let Ok(event) = serde_json::from_slice::<Value>(line) {
                self.count(&event);
            }
        }
    }

    /// One request is one ResponseComplete event, or for a watch its ResponseStarted event (a
    /// watch completes only when it ends).
    fn count(&mut self, event: &Value) {
        let field = |k: &str| event.get(k).and_then(Value::as_str).unwrap_or_default();
        let (verb, stage) = (field("verb"), field("stage"));
        let counted = if verb == "watch" { stage == "ResponseStarted" } else { stage == "ResponseComplete" };
        let Ok(received) = field("requestReceivedTimestamp").parse::<Timestamp>() else { return };
        if !counted || received < self.since {
            return;
        }
        *self.requests.entry(verb.to_owned()).or_default() += 1;
        let resource = event.pointer("/objectRef/resource").and_then(Value::as_str).unwrap_or("-");
        *self.by_resource.entry(format!("{verb} {resource}")).or_default() += 1;
        if let (true, Ok(done)) = (is_write(verb), field("stageTimestamp").parse::<Timestamp>()) {
            self.last_write = self.last_write.max(Some(done));
            if verb == "patch" {
                self.apply_seconds += done.duration_since(received).as_secs_f64();
            }
        }
    }
}
