//! An object's key, `namespace/name`: the one key type of the cache, the queues and the plugins.

use std::fmt;
use std::sync::Arc;

use crate::object::{CachedObject, object_key};

/// An object's key in client-go's `MetaNamespaceKeyFunc` form: `namespace/name`, or `name` for a
/// cluster-scoped object. It is the cache's key, every controller's work-queue key and the key a
/// plugin reconciles and returns from `map`.
///
/// Clones share one allocation, and the key of a cached object is the cache's own key, so a
/// trigger queues a key without allocating, and a queue copies, compares and drops keys as
/// cheaply as client-go does its strings. Namespaces and names cannot contain `/`, so the split
/// is unambiguous ([`ObjectKey::parse`] refuses parts that would make it so).
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectKey(Arc<str>);

/// A key (a plugin's, say) that names no object.
#[derive(Debug, thiserror::Error)]
#[error("`{0}` is not an object key: a name must be non-empty, and neither it nor the namespace may contain `/`")]
pub struct InvalidKey(String);

impl ObjectKey {
    /// The key of `name` in `namespace` (`None` or empty for a cluster-scoped object). The parts
    /// are trusted: use [`ObjectKey::parse`] for parts from outside the host.
    pub fn new(namespace: Option<&str>, name: &str) -> Self {
        Self(object_key(namespace, name).into())
    }

    /// The key of parts from outside the host (a plugin's `map`). An empty namespace means
    /// cluster-scoped, as in client-go. A `/` in a part, or an empty name, is refused: it would
    /// make the key name another object, or none.
    pub fn parse(namespace: Option<&str>, name: &str) -> Result<Self, InvalidKey> {
        if name.is_empty() || name.contains('/') || namespace.is_some_and(|ns| ns.contains('/')) {
            return Err(InvalidKey(object_key(namespace, name)));
        }
        Ok(Self::new(namespace, name))
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
}

impl From<&str> for ObjectKey {
    /// A cache key (`namespace/name` or `name`) as an object key.
    fn from(key: &str) -> Self {
        Self(key.into())
    }
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for ObjectKey {
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
        let key = ObjectKey::new(Some("team-a"), "web");
        assert_eq!((key.namespace(), key.name(), key.as_str()), (Some("team-a"), "web", "team-a/web"));
    }

    #[test]
    fn a_cluster_scoped_key_has_no_namespace() {
        let key = ObjectKey::new(None, "team-a");
        assert_eq!((key.namespace(), key.name(), key.as_str()), (None, "team-a", "team-a"));
    }

    #[test]
    fn the_key_of_a_cached_object_shares_the_cache_key() {
        let json = br#"{"metadata":{"namespace":"team-a","name":"web"}}"#.to_vec();
        let object = CachedObject::from_json(json).expect("valid object");
        let key = ObjectKey::of(&object);
        assert!(Arc::ptr_eq(&key.0, object.key_arc()));
        assert_eq!(key, ObjectKey::new(Some("team-a"), "web"));
    }

    #[test]
    fn a_key_that_would_name_another_object_is_refused() {
        for (namespace, name) in [(None, "team-a/web"), (Some("team-a/x"), "web"), (Some("team-a"), "")] {
            let err = ObjectKey::parse(namespace, name).expect_err("refused");
            assert!(err.to_string().contains("is not an object key"), "{err}");
        }
    }

    #[test]
    fn an_empty_namespace_means_cluster_scoped() {
        assert_eq!(ObjectKey::parse(Some(""), "team-a").expect("valid"), ObjectKey::new(None, "team-a"));
    }

    proptest! {
        #[test]
        fn an_object_key_survives_the_round_trip(
            namespace in proptest::option::of("[a-z0-9][a-z0-9-]{0,20}"),
            name in "[a-z0-9][a-z0-9.-]{0,40}",
        ) {
            let key = ObjectKey::parse(namespace.as_deref(), &name).expect("a valid key");
            prop_assert_eq!((key.namespace(), key.name()), (namespace.as_deref(), name.as_str()));
            prop_assert_eq!(ObjectKey::from(key.as_str()), key);
        }
    }
}
