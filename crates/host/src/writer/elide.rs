//! Elision of applies that would change nothing: an [`ApiWriter`] decorator that answers a
//! server-side apply (of an object or its status) from the plugin's cache, sending nothing,
//! when [`unchanged`](super::unchanged) finds the API server would leave the object as it is.
//!
//! It sends anyway when the kind's cache has not synced, the object is not cached or not the
//! plugin's to see, or the cache has not yet seen the resourceVersion the last write to the
//! object through the host returned (read your writes: resourceVersions are compared for
//! equality only, as Kubernetes allows). Patches, creates and deletes are always sent; their
//! results are remembered for that rule. It sits below the authorizer (an elided apply was
//! allowed like a sent one) and below the canary tap (a candidate is compared with what the
//! serving version meant to write, elided or not).

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use kube::core::GroupVersionKind;
use parking_lot::Mutex;
use serde_json::Value;

use super::unchanged::Apply;
use crate::informer::ObjectKey;
use crate::plugin::api::{ApiCall, ApiReply, ApiWriter, CacheReader, CallError, Caller, ObjectRef, Scope, TypedObject};
use crate::plugin::metrics::PluginMetrics;

/// One object, whatever the version it is named in: its group, kind and key.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Written {
    group: String,
    kind: String,
    key: ObjectKey,
}

impl Written {
    fn of(target: &ObjectRef) -> Self {
        let key = ObjectKey::new(target.namespace.as_deref(), &target.name);
        Self { group: target.kind.group.clone(), kind: target.kind.kind.clone(), key }
    }
}

/// What every plugin's [`ElidingWriter`] shares: the host's switch, the resourceVersions its
/// writes returned that the cache has not shown yet, and the write counter.
#[derive(Clone)]
pub struct Elision(Arc<Shared>);

struct Shared {
    enabled: bool,
    /// Per object written through the host and not yet seen in a cache at that version: the
    /// resourceVersion its last write returned, `None` when unknown (a failed write, a delete).
    written: Mutex<HashMap<Written, Option<String>>>,
    metrics: PluginMetrics,
}

impl Elision {
    /// Elision for the whole host (`--elide-unchanged-writes`); writes counted in `metrics`.
    pub fn new(enabled: bool, metrics: PluginMetrics) -> Self {
        Self(Arc::new(Shared { enabled, written: Mutex::default(), metrics }))
    }

    /// `inner` decorated for one plugin version reading `cache`; with `enabled` false (its
    /// config's `elideUnchangedWrites`) everything is sent, and still remembered for the others.
    pub fn writer(&self, inner: Arc<dyn ApiWriter>, cache: Arc<dyn CacheReader>, enabled: bool) -> ElidingWriter {
        ElidingWriter { inner, cache, enabled: enabled && self.0.enabled, shared: self.0.clone() }
    }
}

impl Shared {
    /// Whether the cache, at `cached_rv`, has seen the last write to `key` through the host; a
    /// write seen is forgotten, since every later cache state is newer.
    fn seen_last_write(&self, key: &Written, cached_rv: &str) -> bool {
        let mut written = self.written.lock();
        match written.get(key) {
            None => true,
            Some(Some(rv)) if rv == cached_rv => {
                written.remove(key);
                true
            }
            Some(_) => false,
        }
    }

    fn remember<T>(&self, target: &ObjectRef, result: &Result<T, CallError>, rv: impl FnOnce(&T) -> Option<String>) {
        let rv = result.as_ref().ok().and_then(rv);
        self.written.lock().insert(Written::of(target), rv);
    }
}

/// The resourceVersion of a stored object's JSON.
fn resource_version(json: &[u8]) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Stored {
        metadata: Meta,
    }
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Meta {
        resource_version: Option<String>,
    }
    serde_json::from_slice::<Stored>(json).ok()?.metadata.resource_version
}

/// Kinds the API server serves itself: the core group, groups without a dot and `*.k8s.io`.
fn builtin(kind: &GroupVersionKind) -> bool {
    !kind.group.contains('.') || kind.group.ends_with(".k8s.io")
}

/// One plugin version's writes: applies that would change nothing answered from its cache.
pub struct ElidingWriter {
    inner: Arc<dyn ApiWriter>,
    cache: Arc<dyn CacheReader>,
    enabled: bool,
    shared: Arc<Shared>,
}

impl ElidingWriter {
    /// The cached object's JSON when applying `object` would change nothing.
    fn unchanged(&self, caller: &Caller, object: &TypedObject, status: bool) -> Option<Vec<u8>> {
        if !self.enabled {
            return None;
        }
        let target = &object.target;
        let cached = self.cache.for_write(&target.kind, target.namespace.as_deref(), &target.name)?;
        let rv = cached.meta().resource_version.as_deref()?;
        if !self.shared.seen_last_write(&Written::of(target), rv) {
            return None;
        }
        let value: Value = cached.value().ok()?;
        // A status apply is sent without the host's mark; an object apply with it.
        let body = if status { Cow::Borrowed(&object.body) } else { object.sent_body() };
        let apply = Apply {
            body: &body,
            cached: &value,
            managed_fields: cached.managed_fields(),
            manager: &caller.manager,
            status,
            builtin: builtin(&target.kind),
        };
        match apply.changes_nothing() {
            Ok(()) => Some(cached.json().to_vec()),
            Err(differs) => {
                tracing::trace!(kind = %target.kind.kind, name = %target.name, %differs, "apply sent");
                None
            }
        }
    }

    fn count(&self, caller: &Caller, outcome: &'static str) {
        self.shared.metrics.write(&caller.plugin, outcome);
    }
}

#[async_trait]
impl ApiWriter for ElidingWriter {
    async fn send(&self, caller: &Caller, call: &ApiCall) -> Result<ApiReply, CallError> {
        let apply = match call {
            ApiCall::Apply { object, .. } => Some((object, false)),
            ApiCall::ApplyStatus { object, .. } => Some((object, true)),
            ApiCall::Patch { .. } | ApiCall::Create(_) | ApiCall::Delete { .. } => None,
            ApiCall::Get(_) | ApiCall::Event(_) => return self.inner.send(caller, call).await,
        };
        if let Some(cached) = apply.and_then(|(object, status)| self.unchanged(caller, object, status)) {
            self.count(caller, "unchanged");
            return Ok(ApiReply::Object(cached));
        }
        let result = self.inner.send(caller, call).await;
        self.count(caller, "sent");
        // A delete's (or a failed write's) resourceVersion is unknown: the next apply is sent.
        self.shared.remember(call.target(), &result, |reply| match reply {
            ApiReply::Object(json) => resource_version(json),
            ApiReply::Found(_) | ApiReply::Done => None,
        });
        result
    }

    async fn scope(&self, kind: &GroupVersionKind) -> Result<Scope, CallError> {
        self.inner.scope(kind).await
    }
}

#[cfg(test)]
#[path = "elide_tests.rs"]
mod tests;
