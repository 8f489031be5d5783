//! The key a controller queues: an object's cache key, shared with the informer cache.

use std::fmt;
use std::sync::Arc;

use crate::informer::CachedObject;
use crate::informer::object::object_key;
use crate::plugin::ObjectKey;

/// An object's key in client-go's `MetaNamespaceKeyFunc` form: `namespace/name`, or `name` for a
/// cluster-scoped object. It is every controller's [`WorkQueue`](crate::queue::WorkQueue) key.
///
/// Clones share one allocation, and the key of a cached object is the cache's own key, so the
/// For trigger queues a key without allocating, and the queue copies, compares and drops keys as
/// cheaply as client-go does its strings. Namespaces and names cannot contain `/`, so the split
/// is unambiguous.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NamespacedKey(Arc<str>);

impl NamespacedKey {
    /// The key of `name` in `namespace` (`None` for a cluster-scoped object).
    pub fn new(namespace: Option<&str>, name: &str) -> Self {
        Self(object_key(namespace, name).into())
    }

    /// The key of a cached object: the cache's key, shared.
    pub fn of(object: &CachedObject) -> Self {
        Self(object.key_arc().clone())
    }

    /// The namespace; `None` for a cluster-scoped object.
    pub fn namespace(&self) -> Option<&str> {
        self.0.split_once('/').map(|(namespace, _)| namespace)
    }

    /// The name.
    pub fn name(&self) -> &str {
        self.0.split_once('/').map_or(&self.0, |(_, name)| name)
    }

    /// The key as the cache stores it.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The plugin-facing form, with owned parts.
    pub fn to_object_key(&self) -> ObjectKey {
        ObjectKey { namespace: self.namespace().map(str::to_owned), name: self.name().to_owned() }
    }
}

/// A key a plugin returned that names no object.
#[derive(Debug, thiserror::Error)]
#[error("`{0}` is not an object key: a name must be non-empty, and neither it nor the namespace may contain `/`")]
pub struct InvalidKey(String);

impl TryFrom<&ObjectKey> for NamespacedKey {
    type Error = InvalidKey;

    /// The queue key of a plugin-facing key. An empty namespace means cluster-scoped, as in
    /// client-go. A `/` in a part is refused: it would make the key name another object.
    fn try_from(key: &ObjectKey) -> Result<Self, InvalidKey> {
        let namespace = key.namespace.as_deref();
        if key.name.is_empty() || key.name.contains('/') || namespace.is_some_and(|ns| ns.contains('/')) {
            return Err(InvalidKey(key.to_string()));
        }
        Ok(Self::new(namespace, &key.name))
    }
}

impl From<&str> for NamespacedKey {
    /// A cache key (`namespace/name` or `name`) as a queue key.
    fn from(key: &str) -> Self {
        Self(key.into())
    }
}

impl fmt::Display for NamespacedKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for NamespacedKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn a_namespaced_key_splits_into_namespace_and_name() {
        let key = NamespacedKey::new(Some("team-a"), "web");
        assert_eq!((key.namespace(), key.name(), key.as_str()), (Some("team-a"), "web", "team-a/web"));
    }

    #[test]
    fn a_cluster_scoped_key_has_no_namespace() {
        let key = NamespacedKey::new(None, "team-a");
        assert_eq!((key.namespace(), key.name(), key.as_str()), (None, "team-a", "team-a"));
    }

    #[test]
    fn the_key_of_a_cached_object_shares_the_cache_key() {
        let json = br#"{"metadata":{"namespace":"team-a","name":"web"}}"#.to_vec();
        let object = CachedObject::from_json(json).expect("valid object");
        let key = NamespacedKey::of(&object);
        assert!(Arc::ptr_eq(&key.0, object.key_arc()));
        assert_eq!(key, NamespacedKey::new(Some("team-a"), "web"));
    }

    #[test]
    fn a_key_that_would_name_another_object_is_refused() {
        for (namespace, name) in [(None, "team-a/web"), (Some("team-a/x"), "web"), (Some("team-a"), "")] {
            let key = ObjectKey { namespace: namespace.map(Into::into), name: name.into() };
            let err = NamespacedKey::try_from(&key).expect_err("refused");
            assert!(err.to_string().contains("is not an object key"), "{err}");
        }
    }

    #[test]
    fn an_empty_namespace_means_cluster_scoped() {
        let key = ObjectKey { namespace: Some(String::new()), name: "team-a".into() };
        assert_eq!(NamespacedKey::try_from(&key).expect("valid"), NamespacedKey::new(None, "team-a"));
    }

    proptest! {
        #[test]
        fn an_object_key_survives_the_round_trip(
            namespace in proptest::option::of("[a-z0-9][a-z0-9-]{0,20}"),
            name in "[a-z0-9][a-z0-9.-]{0,40}",
        ) {
            let object_key = ObjectKey { namespace, name };
            let key = NamespacedKey::try_from(&object_key).expect("a valid key");
            prop_assert_eq!(key.to_object_key(), object_key);
            prop_assert_eq!(NamespacedKey::from(key.as_str()), key);
        }
    }
}
