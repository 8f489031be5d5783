//! Test doubles for the host traits: an in-memory cache (and, re-exported, the recording writer).
//!
//! For unit tests and benchmarks of the plugin runtime only; the real implementations are the
//! informer store and the kube client. The label-selector support here is deliberately small
//! (comma-separated `key=value` terms).

use std::collections::BTreeMap;

use kube::core::GroupVersionKind;
use parking_lot::Mutex;
use serde_json::Value;

use super::Hidden;
pub use super::RecordingWriter;
use super::{CacheReader, CallError, TypedObject, copy_within};

type Key = (String, String, Option<String>, String);

fn key(kind: &GroupVersionKind, namespace: Option<&str>, name: &str) -> Key {
    (kind.group.clone(), kind.kind.clone(), namespace.map(str::to_owned), name.to_owned())
}

/// An in-memory [`CacheReader`] filled by the test. Like the informer cache's view, it leaves
/// out of reads what the last authorizer made over it hides.
#[derive(Default)]
pub struct MemoryCache {
    objects: Mutex<BTreeMap<Key, Vec<u8>>>,
    hidden: Mutex<Option<Hidden>>,
}

impl MemoryCache {
    /// Adds or replaces an object; its kind, namespace and name come from its JSON.
    pub fn insert(&self, json: &Value) {
        let object = TypedObject::from_json(json.to_string().as_bytes()).expect("a test object with kind and name");
        let t = object.target;
        self.objects.lock().insert(key(&t.kind, t.namespace.as_deref(), &t.name), json.to_string().into_bytes());
    }

    /// The read rule the last authorizer installed ([`CacheReader::hide`]), if any.
    pub fn hidden(&self) -> Option<Hidden> {
        self.hidden.lock().clone()
    }

    /// Whether reads leave out objects of `kind` in `namespace`.
    fn hides(&self, kind: &GroupVersionKind, namespace: Option<&str>) -> bool {
        self.hidden.lock().as_ref().is_some_and(|h| h.hides(kind, namespace))
    }

    /// The objects of `kind` that `keep` keeps, copied only if within `max_bytes`, as the
    /// informer cache does (`what` names the read in the error).
    fn matching(
        &self,
        kind: &GroupVersionKind,
        keep: impl Fn(&Key, &Value) -> bool,
        max_bytes: usize,
        what: &str,
    ) -> Result<Vec<Vec<u8>>, CallError> {
        let objects = self.objects.lock();
        let kept: Vec<&Vec<u8>> = objects
            .iter()
            .filter(|(k, _)| k.0 == kind.group && k.1 == kind.kind && !self.hides(kind, k.2.as_deref()))
            .filter(|(k, v)| keep(k, &serde_json::from_slice(v).unwrap_or(Value::Null)))
            .map(|(_, v)| v)
            .collect();
        copy_within(&kept, |v| v.len(), |v| v.to_vec(), max_bytes, || format!("{what} of {}", kind.kind))
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
        if self.hides(kind, namespace) {
            return Ok(None);
        }
        Ok(self.objects.lock().get(&key(kind, namespace, name)).cloned())
    }

    fn hide(&self, hidden: Hidden) {
        *self.hidden.lock() = Some(hidden);
    }

    fn list(
        &self,
        kind: &GroupVersionKind,
        namespace: Option<&str>,
        selector: Option<&str>,
        max_bytes: usize,
    ) -> Result<Vec<Vec<u8>>, CallError> {
        let keep = |k: &Key, v: &Value| {
            namespace.is_none_or(|ns| k.2.as_deref() == Some(ns)) && selector.is_none_or(|s| labels_match(v, s))
        };
        self.matching(kind, keep, max_bytes, "cache.list")
    }

    fn by_index(
        &self,
        kind: &GroupVersionKind,
        index: &str,
        value: &str,
        max_bytes: usize,
    ) -> Result<Vec<Vec<u8>>, CallError> {
        match index {
            "namespace" => self.matching(kind, |k, _| k.2.as_deref() == Some(value), max_bytes, "cache.by-index"),
            "label" => self.matching(kind, |_, v| labels_match(v, value), max_bytes, "cache.by-index"),
            "controller-owner" => {
                let controlled_by = |v: &Value| {
                    let refs = v.pointer("/metadata/ownerReferences").and_then(Value::as_array);
                    refs.into_iter().flatten().any(|r| r["controller"] == true && r["uid"] == value)
                };
                self.matching(kind, |_, v| controlled_by(v), max_bytes, "cache.by-index")
            }
            _ => Err(CallError::Invalid(format!("no index `{index}` on {}", kind.kind))),
        }
    }
}
