//! Test doubles for the host traits: an in-memory cache and a writer that records calls.
//!
//! For unit tests and benchmarks of the plugin runtime only; the real implementations are the
//! informer store and the kube client. The label-selector support here is deliberately small
//! (comma-separated `key=value` terms).

use std::collections::BTreeMap;

use async_trait::async_trait;
use kube::core::GroupVersionKind;
use parking_lot::Mutex;
use serde_json::Value;

use super::{
    ApiWriter, CacheReader, CallError, Caller, DeleteOptions, EventRecord, ObjectRef, Patch, PatchOptions, TypedObject,
};

type Key = (String, String, Option<String>, String);

fn key(kind: &GroupVersionKind, namespace: Option<&str>, name: &str) -> Key {
    (kind.group.clone(), kind.kind.clone(), namespace.map(str::to_owned), name.to_owned())
}

/// An in-memory [`CacheReader`] filled by the test.
#[derive(Default)]
pub struct MemoryCache {
    objects: Mutex<BTreeMap<Key, Vec<u8>>>,
}

impl MemoryCache {
    /// Adds or replaces an object; its kind, namespace and name come from its JSON.
    pub fn insert(&self, json: &Value) {
        let object = TypedObject::from_json(json.to_string().as_bytes()).expect("a test object with kind and name");
        let t = object.target;
        self.objects.lock().insert(key(&t.kind, t.namespace.as_deref(), &t.name), json.to_string().into_bytes());
    }

    fn matching(&self, kind: &GroupVersionKind, keep: impl Fn(&Key, &Value) -> bool) -> Vec<Vec<u8>> {
        self.objects
            .lock()
            .iter()
            .filter(|(k, _)| k.0 == kind.group && k.1 == kind.kind)
            .filter(|(k, v)| keep(k, &serde_json::from_slice(v).unwrap_or(Value::Null)))
            .map(|(_, v)| v.clone())
            .collect()
    }
}

fn labels_match(object: &Value, selector: &str) -> bool {
    selector.split(',').filter(|t| !t.is_empty()).all(|term| {
        let (k, v) = term.split_once('=').unwrap_or((term, ""));
        object.pointer(&format!("/metadata/labels/{}", k.replace('/', "~1"))).and_then(Value::as_str) == Some(v)
    })
}

impl CacheReader for MemoryCache {
    fn get(&self, kind: &GroupVersionKind, namespace: Option<&str>, name: &str) -> Result<Option<Vec<u8>>, CallError> {
        Ok(self.objects.lock().get(&key(kind, namespace, name)).cloned())
    }

    fn list(
        &self,
        kind: &GroupVersionKind,
        namespace: Option<&str>,
        selector: Option<&str>,
    ) -> Result<Vec<Vec<u8>>, CallError> {
        Ok(self.matching(kind, |k, v| {
            namespace.is_none_or(|ns| k.2.as_deref() == Some(ns)) && selector.is_none_or(|s| labels_match(v, s))
        }))
    }

    fn by_index(&self, kind: &GroupVersionKind, index: &str, value: &str) -> Result<Vec<Vec<u8>>, CallError> {
        match index {
            "namespace" => Ok(self.matching(kind, |k, _| k.2.as_deref() == Some(value))),
            "label" => Ok(self.matching(kind, |_, v| labels_match(v, value))),
            _ => Err(CallError::Invalid(format!("no index `{index}` on {}", kind.kind))),
        }
    }
}

/// One write a plugin made through a [`RecordingWriter`].
#[derive(Clone, Debug, PartialEq)]
pub enum WriteCall {
    /// `client.apply`.
    Apply {
        /// Field manager.
        manager: String,
        /// The object.
        object: TypedObject,
        /// Force flag.
        force: bool,
    },
    /// `client.apply-status`.
    ApplyStatus(TypedObject),
    /// `client.patch`.
    Patch(ObjectRef, Patch),
    /// `client.create`.
    Create(TypedObject),
    /// `client.delete`.
    Delete(ObjectRef),
    /// `events.publish`.
    Event(EventRecord),
}

/// An [`ApiWriter`] that records every call and echoes the object back as stored.
#[derive(Default)]
pub struct RecordingWriter {
    calls: Mutex<Vec<WriteCall>>,
    fail_with: Mutex<Option<CallError>>,
    /// What its uncached `get` reads: the test's cluster (often the plugin's cache itself).
    server: Option<std::sync::Arc<dyn CacheReader>>,
}

impl RecordingWriter {
    /// A recording writer whose uncached `get` answers from `server`.
    pub fn serving(server: std::sync::Arc<dyn CacheReader>) -> Self {
        Self { server: Some(server), ..Self::default() }
    }

    /// The calls so far, in order.
    pub fn calls(&self) -> Vec<WriteCall> {
        self.calls.lock().clone()
    }

    /// Makes every later write fail with `error` (events too).
    pub fn fail_with(&self, error: CallError) {
        *self.fail_with.lock() = Some(error);
    }

    fn record(&self, call: WriteCall) -> Result<(), CallError> {
        self.calls.lock().push(call);
        self.fail_with.lock().clone().map_or(Ok(()), Err)
    }
}

#[async_trait]
impl ApiWriter for RecordingWriter {
    async fn apply(&self, caller: &Caller, object: &TypedObject, force: bool) -> Result<Vec<u8>, CallError> {
        self.record(WriteCall::Apply { manager: caller.manager.clone(), object: object.clone(), force })?;
        Ok(object.body.to_string().into_bytes())
    }

    async fn apply_status(&self, _caller: &Caller, object: &TypedObject, _force: bool) -> Result<Vec<u8>, CallError> {
        self.record(WriteCall::ApplyStatus(object.clone()))?;
        Ok(object.body.to_string().into_bytes())
    }

    async fn patch(
        &self,
        _caller: &Caller,
        target: &ObjectRef,
        patch: &Patch,
        _options: &PatchOptions,
    ) -> Result<Vec<u8>, CallError> {
        self.record(WriteCall::Patch(target.clone(), patch.clone()))?;
        Ok(b"{}".to_vec())
    }

    async fn create(&self, _caller: &Caller, object: &TypedObject) -> Result<Vec<u8>, CallError> {
        self.record(WriteCall::Create(object.clone()))?;
        Ok(object.body.to_string().into_bytes())
    }

    async fn delete(&self, _caller: &Caller, target: &ObjectRef, _options: &DeleteOptions) -> Result<(), CallError> {
        self.record(WriteCall::Delete(target.clone()))
    }

    /// Reads from the server it was given, if any; else nothing exists.
    async fn get(&self, _caller: &Caller, target: &ObjectRef) -> Result<Option<Vec<u8>>, CallError> {
        match &self.server {
            Some(server) => server.get(&target.kind, target.namespace.as_deref(), &target.name),
            None => Ok(None),
        }
    }

    async fn publish_event(&self, _caller: &Caller, event: &EventRecord) -> Result<(), CallError> {
        self.record(WriteCall::Event(event.clone()))
    }
}
