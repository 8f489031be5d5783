//! `kubewasm test --server-dry-run`: each write an offline run records is also sent to an API
//! server as a server-side dry run, so a write the server would reject fails the case with the
//! server's message, and the server's state does not change.
//!
//! The plugin is answered as the server answers when the server rejects the write (so the
//! report shows what the plugin does with a 422, and the `WriteRejected` Event the host would
//! record); otherwise as offline, from the fixtures, so a report stays the same from server to
//! server. A write that cannot be validated is said so, and does not fail the case: a patch,
//! delete or status apply of an object only the fixtures hold (404 on the server). A write in a
//! namespace the server lacks fails the case, unless the same reconcile makes that Namespace: a
//! dry run cannot create the namespace first, since nothing it creates is stored, so such a write
//! is validated in the namespace `default` instead (the schema, defaults and cluster-wide
//! admission are the same; a namespace's own policies and quotas are not) and reported so.

use std::collections::BTreeSet;
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
    /// The write's namespace does not exist on the API server.
    #[error(
        "cannot validate {write}: namespace {namespace} does not exist on the API server (create it there, or use fixtures in a namespace that does){}",
        stand_in(validated_in)
    )]
    NoNamespace {
        /// The write.
        write: String,
        /// The namespace.
        namespace: String,
        /// Where the same write was validated instead, if the server took it there.
        validated_in: Option<String>,
    },
    /// The write's namespace does not exist on the API server, and the same reconcile makes it.
    #[error(
        "{write}: namespace {namespace} is made by this reconcile, and a dry run stores nothing{}",
        stand_in(validated_in)
    )]
    InNamespaceMadeHere {
        /// The write.
        write: String,
        /// The namespace.
        namespace: String,
        /// Where the same write was validated instead, if the server took it there.
        validated_in: Option<String>,
    },
    /// The object the write changes (a patch, delete or status apply) is only in the fixtures
    /// (404 on the server): not validated.
    #[error("not validated: {write}: the object is not on the API server, only in the fixtures")]
    NotOnServer {
        /// The write.
        write: String,
    },
}

/// What a finding adds about the stand-in namespace.
fn stand_in(validated_in: &Option<String>) -> String {
    match validated_in {
        Some(namespace) => format!("; the write was validated in namespace {namespace} instead"),
        None => "; not validated".to_owned(),
    }
}

/// The namespace a write into a namespace the server lacks is validated in: every cluster has it.
const STAND_IN: &str = "default";

impl Finding {
    /// Whether the finding fails the case: not for an object only the fixtures hold, nor for a
    /// write in a namespace the same reconcile makes.
    pub fn fails(&self) -> bool {
        !matches!(self, Finding::NotOnServer { .. } | Finding::InNamespaceMadeHere { .. })
    }
}

/// An [`ApiWriter`] that records every call and sends each write to `server` (a writer in
/// dry-run mode) as well, keeping what it found.
pub struct DryRunWriter {
    recorder: Arc<RecordingWriter>,
    server: Arc<dyn ApiWriter>,
    findings: Mutex<Vec<Finding>>,
    /// Namespaces written (applied or created) since the last take.
    namespaces_made: Mutex<BTreeSet<String>>,
}

impl DryRunWriter {
    /// Records into `recorder` and validates writes with `server`, which must not store them
    /// ([`KubeWriter::dry_run`](kubewasm_host::writer::KubeWriter::dry_run)).
    pub fn new(recorder: Arc<RecordingWriter>, server: Arc<dyn ApiWriter>) -> Self {
        Self { recorder, server, findings: Mutex::default(), namespaces_made: Mutex::default() }
    }

    /// What was found since the last call, in order. A write in a namespace the server lacks
    /// and the calls since the last take made is [`Finding::InNamespaceMadeHere`], whichever was
    /// sent first (a desired state's writes are sent together).
    pub fn take(&self) -> Vec<Finding> {
        let made = std::mem::take(&mut *self.namespaces_made.lock());
        let findings = std::mem::take(&mut *self.findings.lock());
        let made_here = |finding| match finding {
            Finding::NoNamespace { write, namespace, validated_in } if made.contains(&namespace) => {
                Finding::InNamespaceMadeHere { write, namespace, validated_in }
            }
            other => other,
        };
        findings.into_iter().map(made_here).collect()
    }

    /// `call` sent to the server in namespace [`STAND_IN`] instead of its own: `None` if it is
    /// not an apply or create, or the server has no such namespace either.
    async fn in_stand_in(&self, caller: &Caller, call: &ApiCall) -> Option<Result<(), CallError>> {
        let mut call = call.clone();
        let (ApiCall::Apply { object, .. } | ApiCall::Create(object)) = &mut call else { return None };
        object.target.namespace = Some(STAND_IN.to_owned());
        object.body["metadata"]["namespace"] = STAND_IN.into();
        match self.server.send(caller, &call).await {
            Ok(_) => Some(Ok(())),
            Err(CallError::NotFound) => None,
            Err(error) => Some(Err(error)),
        }
    }

    /// Why the server answered "not found" to `call`.
    async fn not_found(&self, caller: &Caller, call: &ApiCall) -> Finding {
        let write = call.summary();
        let target = call.target();
        if let Some(namespace) = target.namespace.clone() {
            let kind = GroupVersionKind::gvk("", "v1", "Namespace");
            let ns = ObjectRef { kind, namespace: None, name: namespace.clone() };
            if matches!(self.server.get(caller, ns).await, Ok(None)) {
                let validated_in = match self.in_stand_in(caller, call).await {
                    Some(Err(error)) => return Finding::Rejected { write, error },
                    Some(Ok(())) => Some(STAND_IN.to_owned()),
                    None => None,
                };
                return Finding::NoNamespace { write, namespace, validated_in };
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
        if let ApiCall::Apply { object, .. } | ApiCall::Create(object) = call
            && object.target.kind.group.is_empty()
            && object.target.kind.kind == "Namespace"
        {
            self.namespaces_made.lock().insert(object.target.name.clone());
        }
        // The fixtures, not the server, are the plugin's world: an object the server holds and
        // the fixtures do not is no reason to refuse the write.
        let call = &unlocked(call);
        match self.server.send(caller, call).await {
            Ok(_) => recorded,
            Err(CallError::NotFound) => {
                let finding = self.not_found(caller, call).await;
                // Rejected in the stand-in namespace: the plugin gets the server's error.
                let refused = match &finding {
                    Finding::Rejected { error, .. } if *error != CallError::NotFound => Some(error.clone()),
                    _ => None,
                };
                self.findings.lock().push(finding);
                refused.map_or(recorded, Err)
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

    /// A server that rejects applies as invalid, knows no object and only the namespaces `a` and
    /// `default`, where it takes a create of a ConfigMap without data.
    struct Server;

    #[async_trait]
    impl ApiWriter for Server {
        async fn send(&self, _: &Caller, call: &ApiCall) -> Result<ApiReply, CallError> {
            match call {
                ApiCall::Apply { .. } => Err(CallError::Invalid("data[a/b]: Invalid value".into())),
                ApiCall::Create(o)
                    if o.target.namespace.as_deref() == Some("default") && o.target.kind.kind == "Namespace" =>
                {
                    Err(CallError::Other("a Namespace is cluster-scoped".into()))
                }
                ApiCall::Create(o) if o.target.namespace.as_deref() == Some("default") => match o.body.get("data") {
                    None => Ok(ApiReply::Object(o.body.to_string().into_bytes())),
                    Some(_) => Err(CallError::Invalid("data: not here".into())),
                },
                ApiCall::Create(o) if o.target.kind.kind == "Namespace" => Ok(ApiReply::Object(b"{}".to_vec())),
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
        let validated_in = Some("default".to_owned());
        let write = "create v1 ConfigMap b/c".to_owned();
        assert_eq!(findings, [Finding::NoNamespace { write, namespace: "b".into(), validated_in }]);
        assert!(findings[0].fails());
        assert!(findings[0].to_string().contains("validated in namespace default instead"), "{}", findings[0]);
    }

    fn namespace(name: &str) -> TypedObject {
        let body = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
        TypedObject::from_json(body.to_string().as_bytes()).unwrap()
    }

    #[tokio::test]
    async fn a_write_in_a_namespace_the_same_reconcile_makes_is_validated_in_default_and_passes_whichever_came_first() {
        let (_, writer) = writer();
        let caller = Caller::new("p");
        let object = TypedObject::from_json(config_map("b").to_string().as_bytes()).unwrap();
        writer.create(&caller, object).await.unwrap();
        writer.create(&caller, namespace("b")).await.unwrap();
        let findings = writer.take();
        let validated_in = Some("default".to_owned());
        let write = "create v1 ConfigMap b/c".to_owned();
        assert_eq!(findings, [Finding::InNamespaceMadeHere { write, namespace: "b".into(), validated_in }]);
        assert!(!findings[0].fails());
        let shown = findings[0].to_string();
        assert!(
            shown.contains("namespace b is made by this reconcile") && shown.contains("in namespace default"),
            "{shown}"
        );

        // The next reconcile did not make it: its write fails the case again.
        let object = TypedObject::from_json(config_map("b").to_string().as_bytes()).unwrap();
        writer.create(&caller, object).await.unwrap();
        assert!(writer.take()[0].fails());
    }

    #[tokio::test]
    async fn a_write_the_server_rejects_in_the_stand_in_namespace_answers_its_error_and_fails_the_case() {
        let (_, writer) = writer();
        let caller = Caller::new("p");
        writer.create(&caller, namespace("b")).await.unwrap();
        let mut body = config_map("b");
        body["data"] = json!({"k": "v"});
        let object = TypedObject::from_json(body.to_string().as_bytes()).unwrap();
        let err = writer.create(&caller, object).await.unwrap_err();
        assert_eq!(err, CallError::Invalid("data: not here".into()));
        let findings = writer.take();
        assert_eq!(findings.len(), 1);
        assert!(findings[0].fails(), "{findings:?}");
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
