//! Recording mode of the write path: a plugin's writes and Events are kept as intended writes
//! instead of being sent (`kubewasm test`, `kubewasm record`, and a dry-run canary's candidate).

use std::sync::Arc;

use async_trait::async_trait;
use parking_lot::Mutex;
use serde_json::{Value, json};

use crate::plugin::host::{
    ApiWriter, CacheReader, CallError, Caller, DeleteOptions, EventRecord, ObjectRef, Patch, PatchOptions,
    Preconditions, Propagation, TypedObject,
};

/// One write a plugin asked for, as it would have reached the API server.
#[derive(Clone, Debug, PartialEq)]
pub enum IntendedWrite {
    /// Server-side apply of `object` (`force`: take over conflicting fields).
    Apply {
        /// The applied object.
        object: Value,
        /// The force flag.
        force: bool,
    },
    /// Server-side apply of the status subresource (`force`: take over conflicting fields).
    ApplyStatus {
        /// The applied object.
        object: Value,
        /// The force flag.
        force: bool,
    },
    /// A patch of one object (or its status, with preconditions: contract 0.2).
    Patch(ObjectRef, Patch, PatchOptions),
    /// A create.
    Create(Value),
    /// A delete (with preconditions and a propagation policy: contract 0.2).
    Delete(ObjectRef, DeleteOptions),
    /// An Event.
    Event(EventRecord),
}

/// `namespace/name`, or `name` for a cluster-scoped object.
pub fn object_key(target: &ObjectRef) -> String {
    match &target.namespace {
        Some(ns) => format!("{ns}/{}", target.name),
        None => target.name.clone(),
    }
}

fn reference(target: &ObjectRef) -> Value {
    json!({ "apiVersion": target.kind.api_version(), "kind": target.kind.kind, "key": object_key(target) })
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

impl IntendedWrite {
    /// The write as a report shows it: an apply or create its object, a patch its type and body,
    /// a delete the object's kind and key, an Event its object, type, reason and note.
    pub fn to_value(&self) -> Value {
        match self {
            IntendedWrite::Apply { object, force: false } => json!({ "apply": object }),
            IntendedWrite::Apply { object, force: true } => json!({ "apply": object, "force": true }),
            IntendedWrite::ApplyStatus { object, force: false } => json!({ "applyStatus": object }),
            IntendedWrite::ApplyStatus { object, force: true } => json!({ "applyStatus": object, "force": true }),
            IntendedWrite::Create(object) => json!({ "create": object }),
            IntendedWrite::Patch(target, patch, options) => {
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
            IntendedWrite::Delete(target, options) => {
                let mut delete = reference(target);
                show_preconditions(&mut delete, &options.preconditions);
                match options.propagation {
                    Propagation::Background => {}
                    Propagation::Foreground => delete["propagationPolicy"] = "Foreground".into(),
                    Propagation::Orphan => delete["propagationPolicy"] = "Orphan".into(),
                }
                json!({ "delete": delete })
            }
            IntendedWrite::Event(event) => json!({ "event": {
                "regarding": reference(&event.regarding),
                "type": if event.warning { "Warning" } else { "Normal" },
                "reason": event.reason,
                "note": event.note,
            }}),
        }
    }
}

/// An [`ApiWriter`] that records intended writes and sends nothing. It answers as the API
/// server would for a successful write: an apply or create returns the object written, a patch
/// the cached object with the patch applied (the patch itself when the object is not cached).
pub struct Recorder {
    cache: Option<Arc<dyn CacheReader>>,
    writes: Mutex<Vec<IntendedWrite>>,
}

impl Recorder {
    /// A recorder whose patches are applied to objects read from `cache`, if given.
    pub fn new(cache: Option<Arc<dyn CacheReader>>) -> Self {
        Self { cache, writes: Mutex::default() }
    }

    /// The writes recorded since the last call, in order.
    pub fn take(&self) -> Vec<IntendedWrite> {
        std::mem::take(&mut *self.writes.lock())
    }

    fn record(&self, write: IntendedWrite) {
        self.writes.lock().push(write);
    }

    fn patched(&self, target: &ObjectRef, patch: &Patch) -> Value {
        let cached =
            self.cache.as_ref().and_then(|c| c.get(&target.kind, target.namespace.as_deref(), &target.name).ok());
        let Some(mut object) = cached.flatten().and_then(|b| serde_json::from_slice::<Value>(&b).ok()) else {
            return match patch {
                Patch::Merge(v) | Patch::Json(v) | Patch::Strategic(v) => v.clone(),
            };
        };
        match patch {
            // A strategic merge patch differs from a merge patch only in how lists merge; the
            // answer is informational, the recorded patch is what counts.
            Patch::Merge(v) | Patch::Strategic(v) => json_patch::merge(&mut object, v),
            Patch::Json(v) => {
                if let Ok(ops) = serde_json::from_value::<json_patch::Patch>(v.clone()) {
                    let _ = json_patch::patch(&mut object, &ops);
                }
            }
        }
        object
    }
}

fn to_bytes(value: &Value) -> Vec<u8> {
    value.to_string().into_bytes()
}

#[async_trait]
impl ApiWriter for Recorder {
    async fn apply(&self, _caller: &Caller, object: &TypedObject, force: bool) -> Result<Vec<u8>, CallError> {
        self.record(IntendedWrite::Apply { object: object.body.clone(), force });
        Ok(to_bytes(&object.body))
    }

    async fn apply_status(&self, _caller: &Caller, object: &TypedObject, force: bool) -> Result<Vec<u8>, CallError> {
        self.record(IntendedWrite::ApplyStatus { object: object.body.clone(), force });
        Ok(to_bytes(&object.body))
    }

    async fn patch(
        &self,
        _caller: &Caller,
        target: &ObjectRef,
        patch: &Patch,
        options: &PatchOptions,
    ) -> Result<Vec<u8>, CallError> {
        self.record(IntendedWrite::Patch(target.clone(), patch.clone(), options.clone()));
        Ok(to_bytes(&self.patched(target, patch)))
    }

    async fn create(&self, _caller: &Caller, object: &TypedObject) -> Result<Vec<u8>, CallError> {
        self.record(IntendedWrite::Create(object.body.clone()));
        Ok(to_bytes(&object.body))
    }

    async fn delete(&self, _caller: &Caller, target: &ObjectRef, options: &DeleteOptions) -> Result<(), CallError> {
        self.record(IntendedWrite::Delete(target.clone(), options.clone()));
        Ok(())
    }

    /// Serves contract 0.2's uncached get from the cache: offline, the fixtures are the cluster.
    async fn get(&self, _caller: &Caller, target: &ObjectRef) -> Result<Option<Vec<u8>>, CallError> {
        match &self.cache {
            Some(cache) => cache.get(&target.kind, target.namespace.as_deref(), &target.name),
            None => Ok(None),
        }
    }

    async fn publish_event(&self, _caller: &Caller, event: &EventRecord) -> Result<(), CallError> {
        self.record(IntendedWrite::Event(event.clone()));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugin::host::testing::MemoryCache;
    use kube::core::GroupVersionKind;

    fn config_map() -> ObjectRef {
        ObjectRef { kind: GroupVersionKind::gvk("", "v1", "ConfigMap"), namespace: Some("a".into()), name: "c".into() }
    }

    #[tokio::test]
    async fn a_recorder_keeps_writes_in_order_and_sends_nothing() {
        let recorder = Recorder::new(None);
        let object = TypedObject::from_json(
            br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c","namespace":"a"}}"#,
        )
        .unwrap();
        let stored = recorder.apply(&Caller::new("p"), &object, false).await.unwrap();
        assert_eq!(serde_json::from_slice::<Value>(&stored).unwrap(), object.body);
        recorder.delete(&Caller::new("p"), &config_map(), &DeleteOptions::default()).await.unwrap();
        let writes: Vec<Value> = recorder.take().iter().map(IntendedWrite::to_value).collect();
        assert_eq!(writes[0], json!({ "apply": object.body }));
        assert_eq!(writes[1], json!({ "delete": { "apiVersion": "v1", "kind": "ConfigMap", "key": "a/c" } }));
        assert!(recorder.take().is_empty(), "take drains");
    }

    #[tokio::test]
    async fn a_recorded_patch_answers_with_the_cached_object_patched() {
        let cache = MemoryCache::default();
        cache.insert(
            &json!({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c","namespace":"a"},"data":{"x":"1"}}),
        );
        let recorder = Recorder::new(Some(Arc::new(cache)));
        let patch = Patch::Merge(json!({"data":{"y":"2"}}));
        let answer = recorder.patch(&Caller::new("p"), &config_map(), &patch, &PatchOptions::default()).await.unwrap();
        let answer: Value = serde_json::from_slice(&answer).unwrap();
        assert_eq!(answer["data"], json!({"x":"1","y":"2"}));
        let shown = recorder.take()[0].to_value();
        assert_eq!(shown["patch"]["type"], "merge");
        assert_eq!(shown["patch"]["body"], json!({"data":{"y":"2"}}));
    }
}
