//! Control: whether a plugin controls an object, i.e. the object's controller ownerReference
//! names an object of the plugin's for kind that is in the host's cache.
//!
//! This is what "owns" means for writes without an explicit grant ([`WriteScope::Controlled`]):
//! a plugin that owns ConfigMaps may write the ConfigMaps it controls, not every ConfigMap in
//! the cluster. The owner is looked up in the plugin's own cache, so it must be an object the
//! plugin reconciles (its for kind, within its label selector), and its uid must match the
//! reference: a forged name/uid pair controls nothing.
//!
//! [`WriteScope::Controlled`]: super::grants::WriteScope::Controlled

use kube::core::GroupVersionKind;
use serde::Deserialize;
use serde_json::Value;

use super::api::CacheReader;
use super::grants::KindRef;
use super::registration::EventFilter;

/// Why an object is not controlled by the plugin; the message completes "… because it …".
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NotControlled {
    /// No ownerReference with `controller: true`.
    #[error("carries no controller ownerReference")]
    NoController,
    /// The controller is of another kind than the plugin's for kind.
    #[error("is controlled by {kind} {name}, not by a {for_kind}")]
    OtherKind {
        /// `Kind.group` of the controller.
        kind: String,
        /// Its name.
        name: String,
        /// The plugin's for kind.
        for_kind: KindRef,
    },
    /// The controller is not in the cache (another namespace, another uid, or not reconciled
    /// by this plugin).
    #[error("is controlled by {for_kind} {name} (uid {uid}), which is not an object this plugin reconciles{}", scope_hint(.namespace))]
    OwnerNotCached {
        /// The plugin's for kind.
        for_kind: KindRef,
        /// Name in the reference.
        name: String,
        /// uid in the reference.
        uid: String,
        /// Namespace searched for a namespaced owner.
        namespace: Option<String>,
    },
}

fn scope_hint(namespace: &Option<String>) -> String {
    namespace.as_ref().map(|ns| format!(" in {ns} or cluster-wide")).unwrap_or_default()
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct OwnerRef {
    api_version: String,
    kind: String,
    name: String,
    #[serde(default)]
    uid: String,
    #[serde(default)]
    controller: Option<bool>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct Meta {
    uid: Option<String>,
    namespace: Option<String>,
    labels: std::collections::BTreeMap<String, String>,
    owner_references: Vec<OwnerRef>,
}

fn meta(object: &Value) -> Meta {
    object.get("metadata").and_then(|m| Meta::deserialize(m).ok()).unwrap_or_default()
}

fn cached_meta(cache: &dyn CacheReader, kind: &GroupVersionKind, ns: Option<&str>, name: &str) -> Option<Meta> {
    let bytes = cache.get(kind, ns, name).ok().flatten()?;
    serde_json::from_slice::<Value>(&bytes).ok().map(|v| meta(&v))
}

/// Whether `object` (of the plugin's for kind) is one the plugin reconciles: its for filter's
/// namespace and label selector admit it.
pub fn reconciled(filter: &EventFilter, object: &Value) -> bool {
    reconciled_meta(filter, &meta(object))
}

/// Checks that `object` has a controller ownerReference to an object of `for_kind`, whichever:
/// for objects the plugin made, whose owner may since have left its selection.
pub fn controller_of_kind(object: &Value, for_kind: &GroupVersionKind) -> Result<(), NotControlled> {
    let meta = meta(object);
    let owner = meta.owner_references.iter().find(|r| r.controller == Some(true)).ok_or(NotControlled::NoController)?;
    let group = owner.api_version.rsplit_once('/').map_or("", |(g, _)| g);
    if owner.kind == for_kind.kind && group == for_kind.group {
        return Ok(());
    }
    let kind = KindRef { group: group.to_owned(), kind: owner.kind.clone() };
    Err(NotControlled::OtherKind { kind: kind.to_string(), name: owner.name.clone(), for_kind: KindRef::of(for_kind) })
}

/// Whether `owner` is one of the objects the plugin reconciles: its for filter's namespace and
/// label selector admit it (under contract 0.2 the cache holds every object of the kind, and
/// only the filter says which the plugin reconciles).
fn reconciled_meta(filter: &EventFilter, owner: &Meta) -> bool {
    use kube::core::SelectorExt as _;
    filter.namespace.as_deref().is_none_or(|ns| owner.namespace.as_deref() == Some(ns))
        && filter.label_selector.as_deref().is_none_or(|s| {
            kubewasm_informer::parse_label_selector(s).is_ok_and(|selector| selector.matches(&owner.labels))
        })
}

/// Checks that `object` (in `namespace`) has a controller ownerReference to a cached object of
/// `for_kind` with the same uid, which the plugin reconciles (`for_filter`): in the same
/// namespace, or cluster-scoped.
pub fn check(
    cache: &dyn CacheReader,
    for_kind: &GroupVersionKind,
    for_filter: &EventFilter,
    object: &Value,
    namespace: Option<&str>,
) -> Result<(), NotControlled> {
    let meta = meta(object);
    let owner = meta.owner_references.iter().find(|r| r.controller == Some(true)).ok_or(NotControlled::NoController)?;
    let group = owner.api_version.rsplit_once('/').map_or("", |(g, _)| g);
    let wanted = KindRef::of(for_kind);
    if owner.kind != for_kind.kind || group != for_kind.group {
        let kind = KindRef { group: group.to_owned(), kind: owner.kind.clone() };
        return Err(NotControlled::OtherKind { kind: kind.to_string(), name: owner.name.clone(), for_kind: wanted });
    }
    let same_uid = |m: &Meta| {
        !owner.uid.is_empty() && m.uid.as_deref() == Some(owner.uid.as_str()) && reconciled_meta(for_filter, m)
    };
    let namespaced = namespace.and_then(|ns| cached_meta(cache, for_kind, Some(ns), &owner.name));
    let cluster = || cached_meta(cache, for_kind, None, &owner.name).filter(|m| m.namespace.is_none());
    if namespaced.as_ref().is_some_and(same_uid) || cluster().as_ref().is_some_and(same_uid) {
        return Ok(());
    }
    Err(NotControlled::OwnerNotCached {
        for_kind: wanted,
        name: owner.name.clone(),
        uid: owner.uid.clone(),
        namespace: namespace.map(str::to_owned),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::testing::MemoryCache;
    use serde_json::json;

    fn gvk(g: &str, k: &str) -> GroupVersionKind {
        GroupVersionKind::gvk(g, "v1", k)
    }

    fn owned(owner: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": "a", "ownerReferences": [owner]}})
    }

    fn cache() -> MemoryCache {
        let cache = MemoryCache::default();
        cache.insert(&json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "a", "uid": "u-web"}}));
        cache.insert(&json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "a", "uid": "u-ns"}}));
        cache
    }

    #[test]
    fn an_owner_the_for_filter_leaves_out_does_not_control() {
        let obj = owned(
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": "u-web", "controller": true}),
        );
        let selected = EventFilter { label_selector: Some("app=web".into()), ..EventFilter::default() };
        let err = check(&cache(), &gvk("apps", "Deployment"), &selected, &obj, Some("a")).unwrap_err();
        assert!(matches!(err, NotControlled::OwnerNotCached { .. }), "{err:?}");
        let elsewhere = EventFilter { namespace: Some("b".into()), ..EventFilter::default() };
        assert!(check(&cache(), &gvk("apps", "Deployment"), &elsewhere, &obj, Some("a")).is_err());
    }

    #[test]
    fn a_controller_reference_to_a_cached_owner_in_the_same_namespace_controls() {
        let obj = owned(
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": "u-web", "controller": true}),
        );
        assert_eq!(check(&cache(), &gvk("apps", "Deployment"), &EventFilter::default(), &obj, Some("a")), Ok(()));
    }

    #[test]
    fn a_namespaced_owner_in_another_namespace_does_not_control() {
        let obj = owned(
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": "u-web", "controller": true}),
        );
        let err = check(&cache(), &gvk("apps", "Deployment"), &EventFilter::default(), &obj, Some("b")).unwrap_err();
        assert!(matches!(err, NotControlled::OwnerNotCached { .. }), "{err}");
    }

    #[test]
    fn a_cluster_scoped_owner_controls_namespaced_objects() {
        let obj =
            owned(json!({"apiVersion": "v1", "kind": "Namespace", "name": "a", "uid": "u-ns", "controller": true}));
        assert_eq!(check(&cache(), &gvk("", "Namespace"), &EventFilter::default(), &obj, Some("a")), Ok(()));
    }

    #[test]
    fn a_forged_uid_or_a_missing_controller_flag_does_not_control() {
        let forged =
            owned(json!({"apiVersion": "v1", "kind": "Namespace", "name": "a", "uid": "other", "controller": true}));
        assert!(check(&cache(), &gvk("", "Namespace"), &EventFilter::default(), &forged, Some("a")).is_err());
        let plain = owned(json!({"apiVersion": "v1", "kind": "Namespace", "name": "a", "uid": "u-ns"}));
        assert_eq!(
            check(&cache(), &gvk("", "Namespace"), &EventFilter::default(), &plain, Some("a")),
            Err(NotControlled::NoController)
        );
        let none = json!({"metadata": {"name": "x"}});
        assert_eq!(
            check(&cache(), &gvk("", "Namespace"), &EventFilter::default(), &none, Some("a")),
            Err(NotControlled::NoController)
        );
    }

    #[test]
    fn a_controller_of_another_kind_is_named_in_the_error() {
        let obj =
            owned(json!({"apiVersion": "v1", "kind": "Namespace", "name": "a", "uid": "u-ns", "controller": true}));
        let err = check(&cache(), &gvk("apps", "Deployment"), &EventFilter::default(), &obj, Some("a")).unwrap_err();
        assert_eq!(err.to_string(), "is controlled by Namespace a, not by a Deployment.apps");
    }
}
