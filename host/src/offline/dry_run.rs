//! `kubewasm test --server-dry-run`: each write an offline run records is also sent to an API
//! server as a server-side dry run, so a write the server would reject fails the case with the
//! server's message, and the server's state does not change.
//!
//! The plugin is answered as the server answers when the server rejects the write (so the
//! report shows what the plugin does with a 422, and the `WriteRejected` Event the host would
//! record); otherwise as offline, from the fixtures, so a report stays the same from server to
//! server. A write that cannot be validated is said so, and does not fail the case: a patch,
//! delete or status apply of an object only the fixtures hold (404 on the server). A write in a
//! namespace the server lacks fails the case: a dry run cannot create the namespace first, since
//! nothing it creates is stored.

use std::sync::Arc;

use async_trait::async_trait;
use kube::core::GroupVersionKind;
use kube::discovery::Scope;
use parking_lot::Mutex;

use kubewasm_host::plugin::api::{
    ApiCall, ApiReply, ApiWriter, ApiWriterExt, CallError, Caller, ObjectRef, RecordingWriter,
};

/// What the dry run found about one write.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Finding {
    /// The API server rejected the write; the plugin got its error.
    #[error("the API server rejects {write}: {error}")]
    Rejected {
        /// The write (`apply v1 ConfigMap a/c`).
        write: String,
        /// The server's answer.
        error: CallError,
    },
    /// The write's namespace does not exist on the API server, so the write was not validated.
    #[error(
        "cannot validate {write}: namespace {namespace} does not exist on the API server (create it there, or use fixtures in a namespace that does)"
    )]
    NoNamespace {
        /// The write.
        write: String,
        /// The namespace.
        namespace: String,
    },
    /// The object the write changes (a patch, delete or status apply) is only in the fixtures
    /// (404 on the server): not validated.
    #[error("not validated: {write}: the object is not on the API server, only in the fixtures")]
    NotOnServer {
        /// The write.
        write: String,
    },
}

impl Finding {
    /// Whether the finding fails the case (everything but an object only the fixtures hold).
    pub fn fails(&self) -> bool {
        !matches!(self, Finding::NotOnServer { .. })
    }
}

/// An [`ApiWriter`] that records every call and sends each write to `server` (a writer in
/// dry-run mode) as well, keeping what it found.
pub struct DryRunWriter {
    recorder: Arc<RecordingWriter>,
    server: Arc<dyn ApiWriter>,
    findings: Mutex<Vec<Finding>>,
}

impl DryRunWriter {
    /// Records into `recorder` and validates writes with `server`, which must not store them
    /// ([`KubeWriter::dry_run`](kubewasm_host::writer::KubeWriter::dry_run)).
    pub fn new(recorder: Arc<RecordingWriter>, server: Arc<dyn ApiWriter>) -> Self {
        Self { recorder, server, findings: Mutex::default() }
    }

    /// What was found since the last call, in order.
    pub fn take(&self) -> Vec<Finding> {
        std::mem::take(&mut *self.findings.lock())
    }

    /// Why the server answered "not found" to `call`.
    async fn not_found(&self, caller: &Caller, call: &ApiCall) -> Finding {
        let write = call.summary();
        let target = call.target();
        if let Some(namespace) = target.namespace.clone() {
            let kind = GroupVersionKind::gvk("", "v1", "Namespace");
            let ns = ObjectRef { kind, namespace: None, name: namespace.clone() };
            if matches!(self.server.get(caller, ns).await, Ok(None)) {
                return Finding::NoNamespace { write, namespace };
            }
        }
        match call {
            ApiCall::Patch { .. } | ApiCall::Delete { .. } | ApiCall::ApplyStatus { .. } => {
                Finding::NotOnServer { write }
            }
            _ => Finding::Rejected { write, error: CallError::NotFound },
        }
    }
}

/// `call` without an only-if-absent lock ([`TypedObject::only_if_absent`]).
fn unlocked(call: &ApiCall) -> ApiCall {
    let mut call = call.clone();
    if let ApiCall::Apply { object, .. } = &mut call {
        object.only_if_absent = false;
    }
    call
}

#[async_trait]
impl ApiWriter for DryRunWriter {
    async fn send(&self, caller: &Caller, call: &ApiCall) -> Result<ApiReply, CallError> {
        let recorded = self.recorder.send(caller, call).await;
        if !call.is_write() || matches!(call, ApiCall::Event(_)) {
            return recorded;
        }
        // The fixtures, not the server, are the plugin's world: an object the server holds and
        // the fixtures do not is no reason to refuse the write.
        let call = &unlocked(call);
        match self.server.send(caller, call).await {
            Ok(_) => recorded,
            Err(CallError::NotFound) => {
                let finding = self.not_found(caller, call).await;
                self.findings.lock().push(finding);
                recorded
            }
            Err(error) => {
                self.findings.lock().push(Finding::Rejected { write: call.summary(), error: error.clone() });
                Err(error)
            }
        }
    }

    async fn scope(&self, kind: &GroupVersionKind) -> Result<Scope, CallError> {
        self.server.scope(kind).await
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use kubewasm_host::plugin::api::{DeleteOptions, TypedObject};

    /// A server that rejects applies as invalid, knows no object and only the namespace `a`.
    struct Server;

    #[async_trait]
    impl ApiWriter for Server {
        async fn send(&self, _: &Caller, call: &ApiCall) -> Result<ApiReply, CallError> {
            match call {
                ApiCall::Apply { .. } => Err(CallError::Invalid("data[a/b]: Invalid value".into())),
                ApiCall::Get(target) if target.name == "a" => Ok(ApiReply::Found(Some(b"{}".to_vec()))),
                ApiCall::Get(_) => Ok(ApiReply::Found(None)),
                _ => Err(CallError::NotFound),
            }
        }
    }

    fn config_map(namespace: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": namespace}})
    }

    fn writer() -> (Arc<RecordingWriter>, DryRunWriter) {
        let recorder = Arc::new(RecordingWriter::default());
        (recorder.clone(), DryRunWriter::new(recorder, Arc::new(Server)))
    }

    #[tokio::test]
    async fn a_write_the_server_rejects_answers_its_error_and_fails_the_case() {
        let (recorder, writer) = writer();
        let object = TypedObject::from_json(config_map("a").to_string().as_bytes()).unwrap();
        let err = writer.apply(&Caller::new("p"), object, false).await.unwrap_err();
        assert_eq!(err, CallError::Invalid("data[a/b]: Invalid value".into()));
        let findings = writer.take();
        assert_eq!(findings.len(), 1);
        assert!(findings[0].fails());
        let shown = findings[0].to_string();
        assert_eq!(shown, "the API server rejects apply v1 ConfigMap a/c: invalid: data[a/b]: Invalid value");
        assert_eq!(recorder.take().len(), 1, "recorded all the same");
    }

    #[tokio::test]
    async fn a_write_in_a_namespace_the_server_lacks_fails_the_case_naming_it() {
        let (_, writer) = writer();
        let object = TypedObject::from_json(config_map("b").to_string().as_bytes()).unwrap();
        writer.create(&Caller::new("p"), object).await.unwrap();
        let findings = writer.take();
        assert_eq!(findings, [Finding::NoNamespace { write: "create v1 ConfigMap b/c".into(), namespace: "b".into() }]);
        assert!(findings[0].fails());
    }

    #[tokio::test]
    async fn a_status_apply_of_an_object_only_the_fixtures_hold_is_not_validated_and_passes() {
        let (_, writer) = writer();
        let object = TypedObject::from_json(config_map("a").to_string().as_bytes()).unwrap();
        writer.apply_status(&Caller::new("p"), object, false).await.unwrap();
        assert_eq!(writer.take(), [Finding::NotOnServer { write: "apply status v1 ConfigMap a/c".into() }]);
    }

    #[tokio::test]
    async fn a_delete_of_an_object_only_the_fixtures_hold_is_not_validated_and_passes() {
        let (_, writer) = writer();
        let target = ObjectRef {
            kind: GroupVersionKind::gvk("", "v1", "ConfigMap"),
            namespace: Some("a".into()),
            name: "c".into(),
        };
        writer.delete(&Caller::new("p"), target, DeleteOptions::default()).await.unwrap();
        let findings = writer.take();
        assert_eq!(findings, [Finding::NotOnServer { write: "delete v1 ConfigMap a/c".into() }]);
        assert!(!findings[0].fails());
    }
}
