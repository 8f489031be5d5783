//! The write path's recording mode: an [`ApiWriter`] that keeps each write as an [`ApiCall`]
//! and sends nothing (`kubewasm test`, `kubewasm record`, a dry-run canary's candidate, and the
//! runtime's own tests and benchmarks).

use std::sync::Arc;

use async_trait::async_trait;
use parking_lot::Mutex;
use serde_json::Value;

use super::{ApiCall, ApiReply, ApiWriter, CacheReader, CallError, Caller, ObjectRef, Patch};

/// An [`ApiWriter`] that records intended writes and sends nothing. It answers as the API server
/// would for a successful write: an apply or create returns the object written, a patch the
/// cached object with the patch applied (the patch itself when the object is not cached); the
/// uncached get reads the cache it was given, which offline is the cluster.
#[derive(Default)]
pub struct RecordingWriter {
    cache: Option<Arc<dyn CacheReader>>,
    calls: Mutex<Vec<(Caller, ApiCall)>>,
    fail_with: Mutex<Option<CallError>>,
}

impl RecordingWriter {
    /// A recorder whose patches and gets read objects from `cache`, if given.
    pub fn new(cache: Option<Arc<dyn CacheReader>>) -> Self {
        Self { cache, ..Self::default() }
    }

    /// A recorder reading `cache` (see [`RecordingWriter::new`]).
    pub fn serving(cache: Arc<dyn CacheReader>) -> Self {
        Self::new(Some(cache))
    }

    /// The writes recorded since the last call, in order.
    pub fn take(&self) -> Vec<ApiCall> {
        std::mem::take(&mut *self.calls.lock()).into_iter().map(|(_, call)| call).collect()
    }

    /// The writes recorded so far, in order, leaving them recorded.
    pub fn calls(&self) -> Vec<ApiCall> {
        self.calls.lock().iter().map(|(_, call)| call.clone()).collect()
    }

    /// Who made each recorded write, in the order of [`RecordingWriter::calls`].
    pub fn callers(&self) -> Vec<Caller> {
        self.calls.lock().iter().map(|(caller, _)| caller.clone()).collect()
    }

    /// Makes every later write fail with `error` (after recording it; Events too).
    pub fn fail_with(&self, error: CallError) {
        *self.fail_with.lock() = Some(error);
    }

    fn cached(&self, target: &ObjectRef) -> Result<Option<Vec<u8>>, CallError> {
        match &self.cache {
            Some(cache) => cache.get(&target.kind, target.namespace.as_deref(), &target.name),
            None => Ok(None),
        }
    }

    fn patched(&self, target: &ObjectRef, patch: &Patch) -> Value {
        let cached = self.cached(target).ok().flatten();
        let Some(mut object) = cached.and_then(|b| serde_json::from_slice::<Value>(&b).ok()) else {
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

#[async_trait]
impl ApiWriter for RecordingWriter {
    async fn send(&self, caller: &Caller, call: &ApiCall) -> Result<ApiReply, CallError> {
        if let ApiCall::Get(target) = call {
            return self.cached(target).map(ApiReply::Found);
        }
        self.calls.lock().push((caller.clone(), call.clone()));
        if let Some(error) = self.fail_with.lock().clone() {
            return Err(error);
        }
        Ok(match call {
            ApiCall::Apply { object, .. } | ApiCall::ApplyStatus { object, .. } | ApiCall::Create(object) => {
                ApiReply::Object(object.body.to_string().into_bytes())
            }
            ApiCall::Patch { target, patch, .. } => {
                ApiReply::Object(self.patched(target, patch).to_string().into_bytes())
            }
            ApiCall::Delete { .. } | ApiCall::Event(_) | ApiCall::Get(_) => ApiReply::Done,
        })
    }
}

#[cfg(test)]
mod tests {
    use kube::core::GroupVersionKind;
    use serde_json::json;

    use super::*;
    use crate::api::testing::MemoryCache;
    use crate::api::{ApiWriterExt, DeleteOptions, PatchOptions, TypedObject};

    fn config_map() -> ObjectRef {
        ObjectRef { kind: GroupVersionKind::gvk("", "v1", "ConfigMap"), namespace: Some("a".into()), name: "c".into() }
    }

    #[tokio::test]
    async fn a_recorder_keeps_writes_in_order_and_sends_nothing() {
        let recorder = RecordingWriter::default();
        let object = TypedObject::from_json(
            br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c","namespace":"a"}}"#,
        )
        .unwrap();
        let stored = recorder.apply(&Caller::new("p"), object.clone(), false).await.unwrap();
        assert_eq!(serde_json::from_slice::<Value>(&stored).unwrap(), object.body);
        recorder.delete(&Caller::new("p"), config_map(), DeleteOptions::default()).await.unwrap();
        assert_eq!(recorder.get(&Caller::new("p"), config_map()).await.unwrap(), None, "gets are not writes");
        let writes: Vec<Value> = recorder.take().iter().map(ApiCall::to_value).collect();
        assert_eq!(writes[0], json!({ "apply": object.body }));
        assert_eq!(writes[1], json!({ "delete": { "apiVersion": "v1", "kind": "ConfigMap", "key": "a/c" } }));
        assert_eq!(writes.len(), 2);
        assert!(recorder.take().is_empty(), "take drains");
    }

    #[tokio::test]
    async fn a_recorded_patch_answers_with_the_cached_object_patched() {
        let cache = MemoryCache::default();
        cache.insert(
            &json!({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c","namespace":"a"},"data":{"x":"1"}}),
        );
        let recorder = RecordingWriter::serving(Arc::new(cache));
        let patch = Patch::Merge(json!({"data":{"y":"2"}}));
        let answer = recorder.patch(&Caller::new("p"), config_map(), patch, PatchOptions::default()).await.unwrap();
        let answer: Value = serde_json::from_slice(&answer).unwrap();
        assert_eq!(answer["data"], json!({"x":"1","y":"2"}));
        let shown = recorder.take()[0].to_value();
        assert_eq!(shown["patch"]["type"], "merge");
        assert_eq!(shown["patch"]["body"], json!({"data":{"y":"2"}}));
    }

    #[tokio::test]
    async fn a_failing_recorder_records_the_write_and_answers_the_error() {
        let recorder = RecordingWriter::default();
        recorder.fail_with(CallError::Unavailable("down".into()));
        let err = recorder.delete(&Caller::new("p"), config_map(), DeleteOptions::default()).await.unwrap_err();
        assert_eq!(err, CallError::Unavailable("down".into()));
        assert_eq!(recorder.callers()[0].manager, "kubewasm/p");
        assert_eq!(recorder.calls().len(), 1);
    }
}
