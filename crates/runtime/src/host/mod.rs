//! Host side of the plugin's imports: one file per WIT interface, written against two traits —
//! [`CacheReader`] (the informer store) and [`ApiWriter`] (the API server) — so the runtime is
//! testable without an API server.

pub mod address;
mod authorize;
mod cache;
mod call;
pub use call::{ApiCall, ApiReply, ApiWriterExt};
mod client;
mod config;
mod events;
pub use events::{MAX_NOTE, MAX_REASON};
mod list;
pub use list::{FieldSelector, ListOptions, ObjectList, copy_within, page as list_page, sort_key, too_large};
mod log;
mod recording;
pub use recording::RecordingWriter;
pub mod testing;

use std::sync::Arc;

use async_trait::async_trait;
use kube::core::GroupVersionKind;
pub use kube::discovery::Scope;
use serde_json::Value;

use super::bindings::{types, v0_2};
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

impl From<CallError> for types::Error {
    fn from(e: CallError) -> Self {
        match e {
            CallError::NotFound => types::Error::NotFound,
            CallError::Forbidden(m) => types::Error::Forbidden(m),
            CallError::Conflict(m) => types::Error::Conflict(m),
            CallError::Invalid(m) => types::Error::Invalid(m),
            CallError::Unavailable(m) => types::Error::Unavailable(m),
            CallError::Other(m) => types::Error::Other(m),
        }
    }
}

impl From<CallError> for v0_2::types::Error {
    fn from(e: CallError) -> Self {
        use v0_2::types::Error as E;
        match e {
            CallError::NotFound => E::NotFound,
            CallError::Forbidden(m) => E::Forbidden(m),
            CallError::Conflict(m) => E::Conflict(m),
            CallError::Invalid(m) => E::Invalid(m),
            CallError::Unavailable(m) => E::Unavailable(m),
            CallError::Other(m) => E::Other(m),
        }
    }
}

impl From<v0_2::types::Error> for CallError {
    fn from(e: v0_2::types::Error) -> Self {
        use v0_2::types::Error as E;
        match e {
            E::NotFound => CallError::NotFound,
            E::Forbidden(m) => CallError::Forbidden(m),
            E::Conflict(m) => CallError::Conflict(m),
            E::Invalid(m) => CallError::Invalid(m),
            E::Unavailable(m) => CallError::Unavailable(m),
            E::Other(m) => CallError::Other(m),
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
    /// ([`Hidden::hides`](crate::authorizer::Hidden::hides)): the authorizer installs its read
    /// rule here, so a cached get, list or by-index never returns it. No default: a reader
    /// that wraps another forwards it, or its plugin reads what the rule hides.
    fn hide(&self, hidden: crate::authorizer::Hidden);
    /// The cached object, with the `managedFields` entries the cache keeps, for deciding
    /// whether a write would change it: only once the kind's cache has synced, and only an
    /// object the plugin may see. The default knows nothing, so every write is sent.
    fn for_write(&self, kind: &GroupVersionKind, namespace: Option<&str>, name: &str) -> Option<Arc<CachedObject>> {
        let _ = (kind, namespace, name);
        None
    }
}

/// Names one object of any kind.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ObjectRef {
    /// Kind.
    pub kind: GroupVersionKind,
    /// Namespace; `None` for cluster-scoped objects.
    pub namespace: Option<String>,
    /// Name.
    pub name: String,
}

/// An object a plugin wants written, parsed once by the host: its kind and name (for the grant
/// check and the URL) and its body.
#[derive(Clone, Debug, PartialEq)]
pub struct TypedObject {
    /// Kind, namespace and name from `apiVersion`, `kind` and `metadata`.
    pub target: ObjectRef,
    /// The whole object.
    pub body: Value,
    /// The plugin the host marks the object as made by when it sends it (the
    /// `kubewasm.dev/plugin` label, set by the authorizer's decision); recorders keep the
    /// plugin's own intent and leave it out.
    pub mark: Option<String>,
    /// Send it so that the API server takes it only if no such object exists, and refuses it
    /// with a conflict if one does: for an apply, by naming [`NO_OBJECT_HAS_THIS_VERSION`] as
    /// its resourceVersion (set by the authorizer's decision, `Decision::AllowIfAbsent`).
    pub only_if_absent: bool,
}

/// A resourceVersion no object has: u64::MAX, where kube-apiserver's are etcd revisions (positive
/// int64s) parsed as u64. A server-side apply naming it creates the object if it does not exist;
/// if it does, the optimistic lock refuses the apply with a conflict (checked against
/// kube-apiserver 1.37 in `host/tests/all/first_writes.rs`).
pub const NO_OBJECT_HAS_THIS_VERSION: &str = "18446744073709551615";

/// The largest body the host parses for a plugin: the API server refuses a larger request (its
/// `MaxRequestBodyBytes`, 3 MiB, k8s.io/apiserver's server config), and parsed JSON takes many
/// times its bytes in host memory, outside the plugin's memory budget: 34 MiB of `[0,0,…]`, within
/// a 64 MiB plugin's limit, parses to about a gigabyte.
pub const MAX_BODY: usize = 3 * 1024 * 1024;

/// A plugin's `what` (an object, a patch body) parsed as JSON: `Invalid` if it is not JSON or
/// is larger than [`MAX_BODY`], which is checked before anything is parsed.
pub(crate) fn parse_body(bytes: &[u8], what: &str) -> Result<Value, CallError> {
    if bytes.len() > MAX_BODY {
        return Err(CallError::Invalid(format!(
            "{what} is {} bytes, more than the API server takes in a request ({MAX_BODY})",
            bytes.len()
        )));
    }
    serde_json::from_slice(bytes).map_err(|e| CallError::Invalid(format!("{what} is not valid JSON: {e}")))
}

impl TypedObject {
    /// The body as sent: with the host's mark, if it carries one.
    pub fn sent_body(&self) -> std::borrow::Cow<'_, Value> {
        match &self.mark {
            Some(plugin) => {
                let mut body = self.body.clone();
                crate::authorizer::body::add_mark(&mut body, plugin);
                std::borrow::Cow::Owned(body)
            }
            None => std::borrow::Cow::Borrowed(&self.body),
        }
    }

    /// Parses a plugin's JSON bytes; the error says what is missing.
    pub fn from_json(bytes: &[u8]) -> Result<Self, CallError> {
        let body = parse_body(bytes, "object")?;
        let field = |v: &Value, path: &[&str]| -> Option<String> {
            path.iter().try_fold(v, |v, k| v.get(k))?.as_str().map(str::to_owned)
        };
        let api_version =
            field(&body, &["apiVersion"]).ok_or_else(|| CallError::Invalid("object has no apiVersion".into()))?;
        let kind = field(&body, &["kind"]).ok_or_else(|| CallError::Invalid("object has no kind".into()))?;
        let name = field(&body, &["metadata", "name"])
            .ok_or_else(|| CallError::Invalid("object has no metadata.name".into()))?;
        let (group, version) = api_version.split_once('/').unwrap_or(("", &api_version));
        let target = ObjectRef {
            kind: GroupVersionKind::gvk(group, version, &kind),
            namespace: field(&body, &["metadata", "namespace"]),
            name,
        };
        Ok(Self { target, body, mark: None, only_if_absent: false })
    }
}

/// The kinds of patch a plugin can send.
#[derive(Clone, Debug, PartialEq)]
pub enum Patch {
    /// JSON merge patch (RFC 7386).
    Merge(Value),
    /// JSON patch (RFC 6902).
    Json(Value),
    /// Strategic merge patch.
    Strategic(Value),
}

/// Conditions the API server checks atomically with a patch or delete (metav1.Preconditions).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Preconditions {
    /// The object's resourceVersion must be this.
    pub resource_version: Option<String>,
    /// The object's uid must be this.
    pub uid: Option<String>,
}

impl Preconditions {
    /// Whether there is nothing to check.
    pub fn is_empty(&self) -> bool {
        self.resource_version.is_none() && self.uid.is_none()
    }
}

/// How a patch is sent.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PatchOptions {
    /// Patch the status subresource instead of the object.
    pub status: bool,
    /// Conditions the object must meet.
    pub preconditions: Preconditions,
    /// The uid of the copy the host's authorizer judged the patch on: the API server refuses it
    /// for any other object of the name (one made in the moment before the cache heard of it).
    /// Checked within the write, with no read of its own ([`Preconditions::uid`] reads first).
    pub judged_uid: Option<String>,
}

/// What happens to an object's dependents when it is deleted (metav1.DeletionPropagation).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Propagation {
    /// Delete at once; the garbage collector deletes dependents afterwards (0.1's only policy).
    #[default]
    Background,
    /// Delete once dependents that block owner deletion are gone.
    Foreground,
    /// Keep dependents, removing their ownerReferences.
    Orphan,
}

/// How a delete is sent.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeleteOptions {
    /// Conditions the object must meet.
    pub preconditions: Preconditions,
    /// What happens to dependents.
    pub propagation: Propagation,
    /// As [`PatchOptions::judged_uid`]; a plugin's own uid precondition goes first.
    pub judged_uid: Option<String>,
}

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

/// The cluster-scoped kinds Kubernetes serves itself (`kubectl api-resources --namespaced=false`).
const CLUSTER_SCOPED: &[(&str, &str)] = &[
    ("", "Namespace"),
    ("", "Node"),
    ("", "PersistentVolume"),
    ("", "ComponentStatus"),
    ("admissionregistration.k8s.io", "MutatingWebhookConfiguration"),
    ("admissionregistration.k8s.io", "ValidatingWebhookConfiguration"),
    ("admissionregistration.k8s.io", "ValidatingAdmissionPolicy"),
    ("admissionregistration.k8s.io", "ValidatingAdmissionPolicyBinding"),
    ("admissionregistration.k8s.io", "MutatingAdmissionPolicy"),
    ("admissionregistration.k8s.io", "MutatingAdmissionPolicyBinding"),
    ("apiextensions.k8s.io", "CustomResourceDefinition"),
    ("apiregistration.k8s.io", "APIService"),
    ("certificates.k8s.io", "CertificateSigningRequest"),
    ("flowcontrol.apiserver.k8s.io", "FlowSchema"),
    ("flowcontrol.apiserver.k8s.io", "PriorityLevelConfiguration"),
    ("networking.k8s.io", "IngressClass"),
    ("networking.k8s.io", "IPAddress"),
    ("networking.k8s.io", "ServiceCIDR"),
    ("node.k8s.io", "RuntimeClass"),
    ("rbac.authorization.k8s.io", "ClusterRole"),
    ("rbac.authorization.k8s.io", "ClusterRoleBinding"),
    ("resource.k8s.io", "DeviceClass"),
    ("resource.k8s.io", "ResourceSlice"),
    ("scheduling.k8s.io", "PriorityClass"),
    ("storage.k8s.io", "CSIDriver"),
    ("storage.k8s.io", "CSINode"),
    ("storage.k8s.io", "StorageClass"),
    ("storage.k8s.io", "VolumeAttachment"),
    ("storage.k8s.io", "VolumeAttributesClass"),
    ("kubewasm.dev", "WasmPlugin"),
];

/// [`ApiWriter::scope`]'s default: the built-in cluster-scoped kinds, every other namespaced.
pub fn builtin_scope(kind: &GroupVersionKind) -> Scope {
    if CLUSTER_SCOPED.iter().any(|(g, k)| *g == kind.group && *k == kind.kind) {
        Scope::Cluster
    } else {
        Scope::Namespaced
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_typed_object_takes_group_version_kind_and_name_from_its_json() {
        let o = TypedObject::from_json(
            br#"{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"web","namespace":"a"}}"#,
        )
        .unwrap();
        assert_eq!(o.target.kind, GroupVersionKind::gvk("apps", "v1", "Deployment"));
        assert_eq!((o.target.namespace.as_deref(), o.target.name.as_str()), (Some("a"), "web"));
        let core =
            TypedObject::from_json(br#"{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"x"}}"#).unwrap();
        assert_eq!((core.target.kind.group.as_str(), core.target.namespace), ("", None));
    }

    #[test]
    fn a_typed_object_without_a_name_or_valid_json_is_invalid_with_a_reason() {
        let no_name = TypedObject::from_json(br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{}}"#);
        assert_eq!(no_name.unwrap_err(), CallError::Invalid("object has no metadata.name".into()));
        let garbage = TypedObject::from_json(b"{not json").unwrap_err();
        assert!(matches!(garbage, CallError::Invalid(m) if m.starts_with("object is not valid JSON")));
    }

    /// Held-out round of issue 49: a plugin within its memory limit sent a patch body of
    /// `[0,0,…]` that parses to many times its size in host memory.
    #[test]
    fn a_body_larger_than_the_api_server_takes_is_refused_before_it_is_parsed() {
        let mut huge = b"[0".to_vec();
        huge.extend(std::iter::repeat_n(b",0"[..].iter().copied(), MAX_BODY / 2).flatten());
        huge.push(b']');
        let refused = parse_body(&huge, "patch body").unwrap_err();
        assert!(
            matches!(&refused, CallError::Invalid(m) if m.contains("more than the API server takes")),
            "{refused:?}"
        );
        assert!(parse_body(b"[0,0]", "patch body").is_ok());
        let object = TypedObject::from_json(&huge).unwrap_err();
        assert!(matches!(object, CallError::Invalid(m) if m.starts_with("object is")));
    }
}
