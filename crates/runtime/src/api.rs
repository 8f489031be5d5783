//! The ports the plugin runtime is written against, and what flows through them: [`CacheReader`]
//! (the informer store), [`ApiWriter`] (the API server) and the one request type,
//! [`ApiCall`], that every writer and decorator handles. It knows nothing of WIT or wasm, so the
//! host's writers, the authorizer and the host functions all build on it.

pub mod address;
mod call;
pub use call::{ApiCall, ApiReply, ApiWriterExt};
mod list;
pub use list::{FieldSelector, ListOptions, ObjectList, copy_within, page as list_page, sort_key, too_large};
mod object;
pub(crate) use object::parse_body;
pub use object::{
    DeleteOptions, MAX_BODY, NO_OBJECT_HAS_THIS_VERSION, ObjectRef, PLUGIN_LABEL, Patch, PatchOptions, Preconditions,
    Propagation, TypedObject, add_mark,
};
mod no_cluster;
pub use no_cluster::NoCluster;
mod recording;
pub use recording::RecordingWriter;
mod scope;
pub use scope::builtin_scope;
pub mod testing;

use std::sync::Arc;

use async_trait::async_trait;
use kube::core::GroupVersionKind;
pub use kube::discovery::Scope;
use serde_json::Value;

use kubewasm_informer::CachedObject;

/// What every plugin's field manager starts with (`kubewasm/<plugin>`); the informer cache keeps
/// these managers' `managedFields` entries.
pub const FIELD_MANAGER_PREFIX: &str = "kubewasm/";

/// Why a cache read or API write failed; mirrors the WIT `error` variant.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CallError {
    /// The object does not exist.
    #[error("not found")]
    NotFound,
    /// Outside the plugin's grants, or refused by the API server.
    #[error("forbidden: {0}")]
    Forbidden(String),
    /// Optimistic-concurrency or field-ownership conflict.
    #[error("conflict: {0}")]
    Conflict(String),
    /// Malformed request or object.
    #[error("invalid: {0}")]
    Invalid(String),
    /// Transient failure; retry later.
    #[error("unavailable: {0}")]
    Unavailable(String),
    /// Anything else.
    #[error("{0}")]
    Other(String),
}

impl CallError {
    /// Bounded label for metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            CallError::NotFound => "not_found",
            CallError::Forbidden(_) => "forbidden",
            CallError::Conflict(_) => "conflict",
            CallError::Invalid(_) => "invalid",
            CallError::Unavailable(_) => "unavailable",
            CallError::Other(_) => "other",
        }
    }
}

/// Reads the informer cache; implemented by the informer store, and by
/// [`testing::MemoryCache`] in tests. Reads are local and synchronous.
///
/// A read of many objects copies at most `max_bytes` of JSON, counted before it copies any
/// ([`copy_within`]), else fails as [`too_large`]: the copy is host memory, which the plugin's
/// memory limit (linear memory only) does not count, so the runtime passes what that limit
/// leaves the plugin.
pub trait CacheReader: Send + Sync + 'static {
    /// The object's JSON, if cached.
    fn get(&self, kind: &GroupVersionKind, namespace: Option<&str>, name: &str) -> Result<Option<Vec<u8>>, CallError>;
    /// Cached objects of `kind`, optionally in one namespace and matching a label selector,
    /// within `max_bytes`.
    fn list(
        &self,
        kind: &GroupVersionKind,
        namespace: Option<&str>,
        label_selector: Option<&str>,
        max_bytes: usize,
    ) -> Result<Vec<Vec<u8>>, CallError>;
    /// One page of the cached objects of `kind` matching `options` (contract 0.2), within
    /// `max_bytes` ([`list_page`]). The default pages over the whole [`list`](Self::list),
    /// reading each object's namespace and name from its JSON (a reader holding JSON only has
    /// nothing cheaper); the informer cache overrides it with its parsed objects and copies
    /// only the page.
    fn list_page(
        &self,
        kind: &GroupVersionKind,
        options: &ListOptions,
        max_bytes: usize,
    ) -> Result<ObjectList, CallError> {
        let fields = options.field_selector.as_deref().map(FieldSelector::parse).transpose()?;
        let (namespace, selector) = (options.namespace.as_deref(), options.label_selector.as_deref());
        let objects = self.list(kind, namespace, selector, usize::MAX)?;
        let keyed = objects.into_iter().map(|json| {
            let meta: Value = serde_json::from_slice(&json).unwrap_or(Value::Null);
            let field = |f: &str| meta.pointer(&format!("/metadata/{f}")).and_then(Value::as_str).map(str::to_owned);
            let (namespace, name) = (field("namespace"), field("name").unwrap_or_default());
            (sort_key(namespace.as_deref(), &name), (namespace, name, json))
        });
        let keep = |(ns, name, _): &(Option<String>, String, Vec<u8>)| {
            fields.as_ref().is_none_or(|f| f.matches(ns.as_deref(), name))
        };
        let what = || format!("cache.list of {}", kind.kind);
        list_page(keyed, options, keep, |(_, _, json)| json.len(), |(_, _, json)| json, max_bytes, what)
    }
    /// Cached objects of `kind` whose index `index` has `value`, within `max_bytes`.
    fn by_index(
        &self,
        kind: &GroupVersionKind,
        index: &str,
        value: &str,
        max_bytes: usize,
    ) -> Result<Vec<Vec<u8>>, CallError>;
    /// Whether the plugin may see and write objects in `namespace` (`grants.namespaces`); reads
    /// already leave out what it may not see.
    fn in_scope(&self, namespace: &str) -> bool {
        let _ = namespace;
        true
    }
    /// Leaves out of every read from now on what `hidden` hides from the plugin
    /// ([`Hidden::hides`]): the authorizer installs its read rule here, so a cached get, list or by-index never returns it. No default: a reader
    /// that wraps another forwards it, or its plugin reads what the rule hides.
    fn hide(&self, hidden: Hidden);
    /// The cached object, with the `managedFields` entries the cache keeps, for deciding
    /// whether a write would change it: only once the kind's cache has synced, and only an
    /// object the plugin may see. The default knows nothing, so every write is sent.
    fn for_write(&self, kind: &GroupVersionKind, namespace: Option<&str>, name: &str) -> Option<Arc<CachedObject>> {
        let _ = (kind, namespace, name);
        None
    }
}

/// What a plugin's reads leave out, as its authorizer rules: asked of every cached object the
/// plugin reads, with the object's kind and namespace ([`CacheReader::hide`] installs it).
#[derive(Clone)]
pub struct Hidden(Arc<HidesFn>);

/// The rule of a [`Hidden`]: whether an object of a kind, in a namespace, is hidden.
type HidesFn = dyn Fn(&GroupVersionKind, Option<&str>) -> bool + Send + Sync;

impl Hidden {
    /// The rule `hides`.
    pub fn new(hides: impl Fn(&GroupVersionKind, Option<&str>) -> bool + Send + Sync + 'static) -> Self {
        Self(Arc::new(hides))
    }

    /// Whether an object of `kind` in `namespace` is left out of the plugin's reads.
    pub fn hides(&self, kind: &GroupVersionKind, namespace: Option<&str>) -> bool {
        (self.0)(kind, namespace)
    }
}

impl std::fmt::Debug for Hidden {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Hidden(..)")
    }
}

/// Longest event note kept, in bytes (the API server allows 1 KiB for `note`).
pub const MAX_NOTE: usize = 1024;

/// Longest event reason (the API server allows 128 characters).
pub const MAX_REASON: usize = 128;

/// An event a plugin publishes, or the host reports about a plugin's calls.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventRecord {
    /// The object the event is about.
    pub regarding: ObjectRef,
    /// `Warning` rather than `Normal`.
    pub warning: bool,
    /// Machine-readable reason.
    pub reason: String,
    /// Human-readable note.
    pub note: String,
    /// Reported by the host about the plugin's calls (`AccessDenied`, `WriteRejected`), not
    /// published by the plugin: still sent as the plugin, but queued apart from and ahead of
    /// its Events, so no flood of them drops it. Never set from a plugin's call.
    pub by_host: bool,
}

/// Who a request is made for: the plugin whose identity it is sent as, and its field manager.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caller {
    /// The plugin acting; a canary candidate acts as the plugin it is a candidate of.
    pub plugin: String,
    /// Field manager (`kubewasm/<plugin>`, or `kubewasm/<plugin>/canary` for a candidate), also
    /// the events' reporting controller.
    pub manager: String,
}

impl Caller {
    /// The caller of plugin `plugin`, which may be a variant (`<plugin>/canary`): the manager
    /// keeps the variant, the identity is the plugin's. Plugin names hold no `/`.
    pub fn new(plugin: &str) -> Self {
        let identity = plugin.split_once('/').map_or(plugin, |(plugin, _)| plugin);
        Self { plugin: identity.to_owned(), manager: format!("{FIELD_MANAGER_PREFIX}{plugin}") }
    }
}

/// Sends requests to the API server on a plugin's behalf, as its [`Caller`]: implemented over
/// kube's client, by [`RecordingWriter`] (offline, record, canary, tests), and by the decorators
/// of the write path, each of which handles the one [`ApiCall`] type in one method.
#[async_trait]
pub trait ApiWriter: Send + Sync + 'static {
    /// Sends `call` as `caller`.
    async fn send(&self, caller: &Caller, call: &ApiCall) -> Result<ApiReply, CallError>;
    /// Whether `kind` is namespaced or cluster-scoped, as the API server's discovery says. The
    /// default, for writers with no server behind them, knows the built-in cluster-scoped kinds
    /// and takes every other kind as namespaced.
    async fn scope(&self, kind: &GroupVersionKind) -> Result<Scope, CallError> {
        Ok(builtin_scope(kind))
    }
}
