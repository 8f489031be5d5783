//! One request a plugin makes of the API server ([`ApiCall`]) and its answer ([`ApiReply`]):
//! the one type every writer and decorator handles, and the one a recording writer keeps.

use async_trait::async_trait;
use kubewasm_informer::object::object_key;
use serde_json::{Value, json};

use super::{ApiWriter, CallError, Caller, DeleteOptions, EventRecord, ObjectRef, Patch, PatchOptions, Propagation};
use super::{Preconditions, TypedObject};

/// One request to the API server on a plugin's behalf.
#[derive(Clone, Debug, PartialEq)]
pub enum ApiCall {
    /// Server-side apply of the object (`force`: take over conflicting fields).
    Apply {
        /// The object applied.
        object: TypedObject,
        /// The force flag.
        force: bool,
    },
    /// Server-side apply of the status subresource.
    ApplyStatus {
        /// The object applied.
        object: TypedObject,
        /// The force flag.
        force: bool,
    },
    /// A patch of one object, or of its status, if it meets the preconditions.
    Patch {
        /// The object patched.
        target: ObjectRef,
        /// The patch.
        patch: Patch,
        /// Status subresource and preconditions.
        options: PatchOptions,
    },
    /// A create.
    Create(TypedObject),
    /// A delete, as `options` say.
    Delete {
        /// The object deleted.
        target: ObjectRef,
        /// Preconditions and propagation.
        options: DeleteOptions,
    },
    /// A read from the API server that bypasses the cache (contract 0.2's `client.get`).
    Get(ObjectRef),
    /// An Event reported by the caller's field manager.
    Event(EventRecord),
}

/// What the API server answered to an [`ApiCall`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ApiReply {
    /// The object as stored (apply, patch, create).
    Object(Vec<u8>),
    /// The object read, or `None` if it does not exist (get).
    Found(Option<Vec<u8>>),
    /// Done, with nothing to return (delete, Event).
    Done,
}

impl ApiReply {
    /// The stored object of an apply, patch or create.
    pub fn into_object(self) -> Result<Vec<u8>, CallError> {
        match self {
            ApiReply::Object(bytes) => Ok(bytes),
            other => Err(CallError::Other(format!("expected the stored object, the writer answered {other:?}"))),
        }
    }

    /// The object a get read, if it exists.
    pub fn into_found(self) -> Result<Option<Vec<u8>>, CallError> {
        match self {
            ApiReply::Found(found) => Ok(found),
            other => Err(CallError::Other(format!("expected a read, the writer answered {other:?}"))),
        }
    }
}

impl ApiCall {
    /// The object the call is about (an Event: the object it regards).
    pub fn target(&self) -> &ObjectRef {
        match self {
            ApiCall::Apply { object, .. } | ApiCall::ApplyStatus { object, .. } | ApiCall::Create(object) => {
                &object.target
            }
            ApiCall::Patch { target, .. } | ApiCall::Delete { target, .. } | ApiCall::Get(target) => target,
            ApiCall::Event(event) => &event.regarding,
        }
    }

    /// Whether the call is an apply sent only if no such object exists
    /// ([`TypedObject::only_if_absent`]).
    pub fn only_if_absent(&self) -> bool {
        matches!(self, ApiCall::Apply { object, .. } if object.only_if_absent)
    }

    /// Whether the call changes the cluster (everything but a get).
    pub fn is_write(&self) -> bool {
        !matches!(self, ApiCall::Get(_))
    }

    /// The call in a few words, for messages: its verb and object (`apply v1 ConfigMap a/c`,
    /// `patch status apps/v1 Deployment a/d`).
    pub fn summary(&self) -> String {
        let verb = match self {
            ApiCall::Apply { .. } => "apply",
            ApiCall::ApplyStatus { .. } => "apply status",
            ApiCall::Patch { options, .. } if options.status => "patch status",
            ApiCall::Patch { .. } => "patch",
            ApiCall::Create(_) => "create",
            ApiCall::Delete { .. } => "delete",
            ApiCall::Get(_) => "get",
            ApiCall::Event(_) => "event about",
        };
        let target = self.target();
        let key = object_key(target.namespace.as_deref(), &target.name);
        format!("{verb} {} {} {key}", target.kind.api_version(), target.kind.kind)
    }

    /// The call as a report shows it (`kubewasm test`, `kubewasm record`, a canary's diff): an
    /// apply or create its object, a patch its type and body, a delete the object's kind and
    /// key, an Event its object, type, reason and note, a get its object.
    pub fn to_value(&self) -> Value {
        match self {
            ApiCall::Apply { object, force: false } => json!({ "apply": object.body }),
            ApiCall::Apply { object, force: true } => json!({ "apply": object.body, "force": true }),
            ApiCall::ApplyStatus { object, force: false } => json!({ "applyStatus": object.body }),
            ApiCall::ApplyStatus { object, force: true } => json!({ "applyStatus": object.body, "force": true }),
            ApiCall::Create(object) => json!({ "create": object.body }),
            ApiCall::Patch { target, patch, options } => {
                let (kind, body) = match patch {
                    Patch::Merge(v) => ("merge", v),
                    Patch::Json(v) => ("json", v),
                    Patch::Strategic(v) => ("strategic", v),
                };
                let mut patch = reference(target);
                patch["type"] = kind.into();
                patch["body"] = body.clone();
                if options.status {
                    patch["subresource"] = "status".into();
                }
                show_preconditions(&mut patch, &options.preconditions);
                json!({ "patch": patch })
            }
            ApiCall::Delete { target, options } => {
                let mut delete = reference(target);
                show_preconditions(&mut delete, &options.preconditions);
                match options.propagation {
                    Propagation::Background => {}
                    Propagation::Foreground => delete["propagationPolicy"] = "Foreground".into(),
                    Propagation::Orphan => delete["propagationPolicy"] = "Orphan".into(),
                }
                json!({ "delete": delete })
            }
            ApiCall::Get(target) => json!({ "get": reference(target) }),
            ApiCall::Event(event) => json!({ "event": {
                "regarding": reference(&event.regarding),
                "type": if event.warning { "Warning" } else { "Normal" },
                "reason": event.reason,
                "note": event.note,
            }}),
        }
    }
}

fn reference(target: &ObjectRef) -> Value {
    let key = object_key(target.namespace.as_deref(), &target.name);
    json!({ "apiVersion": target.kind.api_version(), "kind": target.kind.kind, "key": key })
}

/// Adds the preconditions that are set to `shown` (nothing when there are none, so 0.1 writes
/// read as before).
fn show_preconditions(shown: &mut Value, preconditions: &Preconditions) {
    if let Some(rv) = &preconditions.resource_version {
        shown["preconditions"]["resourceVersion"] = rv.as_str().into();
    }
    if let Some(uid) = &preconditions.uid {
        shown["preconditions"]["uid"] = uid.as_str().into();
    }
}

/// Typed shorthands over [`ApiWriter::send`], one per call, for any writer.
#[async_trait]
pub trait ApiWriterExt: ApiWriter {
    /// Server-side apply; returns the stored object's JSON.
    async fn apply(&self, caller: &Caller, object: TypedObject, force: bool) -> Result<Vec<u8>, CallError> {
        self.send(caller, &ApiCall::Apply { object, force }).await?.into_object()
    }

    /// Server-side apply of the status subresource.
    async fn apply_status(&self, caller: &Caller, object: TypedObject, force: bool) -> Result<Vec<u8>, CallError> {
        self.send(caller, &ApiCall::ApplyStatus { object, force }).await?.into_object()
    }

    /// Patches an object (or its status), if it meets the preconditions.
    async fn patch(
        &self,
        caller: &Caller,
        target: ObjectRef,
        patch: Patch,
        options: PatchOptions,
    ) -> Result<Vec<u8>, CallError> {
        self.send(caller, &ApiCall::Patch { target, patch, options }).await?.into_object()
    }

    /// Creates an object.
    async fn create(&self, caller: &Caller, object: TypedObject) -> Result<Vec<u8>, CallError> {
        self.send(caller, &ApiCall::Create(object)).await?.into_object()
    }

    /// Deletes an object as `options` say.
    async fn delete(&self, caller: &Caller, target: ObjectRef, options: DeleteOptions) -> Result<(), CallError> {
        self.send(caller, &ApiCall::Delete { target, options }).await.map(drop)
    }

    /// Reads an object from the API server, bypassing the cache; `None` if it does not exist.
    async fn get(&self, caller: &Caller, target: ObjectRef) -> Result<Option<Vec<u8>>, CallError> {
        self.send(caller, &ApiCall::Get(target)).await?.into_found()
    }

    /// Publishes an Event reported by the caller's manager.
    async fn publish_event(&self, caller: &Caller, event: EventRecord) -> Result<(), CallError> {
        self.send(caller, &ApiCall::Event(event)).await.map(drop)
    }
}

impl<W: ApiWriter + ?Sized> ApiWriterExt for W {}

#[cfg(test)]
mod tests {
    use kube::core::GroupVersionKind;

    use super::*;

    fn config_map() -> ObjectRef {
        ObjectRef { kind: GroupVersionKind::gvk("", "v1", "ConfigMap"), namespace: Some("a".into()), name: "c".into() }
    }

    #[test]
    fn a_delete_shows_its_kind_key_preconditions_and_propagation() {
        let options = DeleteOptions {
            preconditions: Preconditions { resource_version: Some("7".into()), uid: None },
            propagation: Propagation::Orphan,
            judged_uid: None,
        };
        let shown = ApiCall::Delete { target: config_map(), options }.to_value();
        assert_eq!(
            shown,
            json!({ "delete": { "apiVersion": "v1", "kind": "ConfigMap", "key": "a/c",
                "preconditions": { "resourceVersion": "7" }, "propagationPolicy": "Orphan" } })
        );
    }

    #[test]
    fn a_summary_names_the_verb_kind_and_key() {
        let options = PatchOptions { status: true, ..Default::default() };
        let call = ApiCall::Patch { target: config_map(), patch: Patch::Merge(json!({})), options };
        assert_eq!(call.summary(), "patch status v1 ConfigMap a/c");
        let delete = ApiCall::Delete { target: config_map(), options: DeleteOptions::default() };
        assert_eq!(delete.summary(), "delete v1 ConfigMap a/c");
    }
}
