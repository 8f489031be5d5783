//! The informer cache: a thread-safe, indexed store of objects (client-go `Indexer` over a
//! `ThreadSafeStore`).
//!
//! Hand-written because kube-runtime's `reflector::Store` has no custom indexes.

use std::{
    borrow::Borrow,
    collections::{HashMap, HashSet},
    hash::{Hash, Hasher},
    sync::Arc,
};

use kube::core::{Expression, Selector};
use parking_lot::RwLock;
use serde_json::Value;

use super::{
    Error, Result,
    index::{IndexFunc, Indexers, LABEL_INDEX, NAMESPACE_INDEX, default_indexers},
    labels,
    object::{CachedObject, object_key},
    selector::parse_label_selector,
};

/// Index value → keys of the objects filed under it.
type Index = HashMap<String, HashSet<Arc<str>>>;

/// A thread-safe cache of objects keyed by MetaNamespaceKey, with indexes.
///
/// Reads hand out `Arc<CachedObject>`s: no copy of the body, no JSON work. Index answers stay
/// exact under updates: an update removes the object from the index values it left.
pub struct Store {
    inner: RwLock<Inner>,
}

/// An object in the item set, hashed and compared by its key, so the set needs one pointer per
/// object where a key → object map would hold two `Arc`s (the key already lives in the object).
struct Item(Arc<CachedObject>);

impl Borrow<str> for Item {
    fn borrow(&self) -> &str {
        self.0.key()
    }
}
impl Hash for Item {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.0.key().hash(state);
    }
}
impl PartialEq for Item {
    fn eq(&self, other: &Self) -> bool {
        self.0.key() == other.0.key()
    }
}
impl Eq for Item {}

#[derive(Default)]
struct Inner {
    items: HashSet<Item>,
    indexers: Indexers,
    indices: HashMap<String, Index>,
}

impl Default for Store {
    fn default() -> Self {
        Self::new()
    }
}

impl Store {
    /// An empty store with the built-in indexes (namespace, label, controller owner).
    pub fn new() -> Self {
        Self::with_indexers(default_indexers())
    }

    /// An empty store with exactly these indexes.
    pub fn with_indexers(indexers: Indexers) -> Self {
        let indices = indexers.keys().map(|k| (k.clone(), Index::new())).collect();
        Self { inner: RwLock::new(Inner { items: HashSet::new(), indexers, indices }) }
    }

    /// The object with this MetaNamespaceKey (`ns/name` or `name`).
    pub fn get_by_key(&self, key: &str) -> Option<Arc<CachedObject>> {
        self.inner.read().object(key).cloned()
    }

    /// The object with this namespace and name.
    pub fn get(&self, namespace: Option<&str>, name: &str) -> Option<Arc<CachedObject>> {
        self.get_by_key(&object_key(namespace, name))
    }

    /// Every cached object, in no particular order.
    pub fn list(&self) -> Vec<Arc<CachedObject>> {
        self.inner.read().objects().cloned().collect()
    }

    /// Every cached key.
    pub fn list_keys(&self) -> Vec<String> {
        self.inner.read().objects().map(|o| o.key().to_owned()).collect()
    }

    /// Number of cached objects.
    pub fn len(&self) -> usize {
        self.inner.read().items.len()
    }

    /// Whether the store is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Objects in `namespace` (all namespaces when `None`) whose labels match `label_selector`
    /// in the apimachinery string syntax, set-based requirements included.
    pub fn list_selected(&self, namespace: Option<&str>, label_selector: &str) -> Result<Vec<Arc<CachedObject>>> {
        let selector = parse_label_selector(label_selector)?;
        Ok(self.list_selector(namespace, &selector))
    }

    /// Like [`list_selected`](Self::list_selected) with an already parsed selector. Narrows the
    /// scan through the label or namespace index when it can.
    pub fn list_selector(&self, namespace: Option<&str>, selector: &Selector) -> Vec<Arc<CachedObject>> {
        let inner = self.inner.read();
        let requirements = labels::requirements(selector);
        let equal = requirements.iter().find_map(|e| match e {
            Expression::Equal(k, v) => Some(format!("{k}={v}")),
            _ => None,
        });
        let keep = |o: &&Arc<CachedObject>| {
            namespace.is_none_or(|ns| o.namespace().unwrap_or("") == ns)
                && labels::matches(&requirements, &o.meta().labels)
        };
        let from_index = |index: &str, value: &str| -> Option<Vec<Arc<CachedObject>>> {
            let keys = inner.indices.get(index)?.get(value);
            Some(keys.into_iter().flatten().filter_map(|k| inner.object(k)).filter(keep).cloned().collect())
        };
        if let Some(found) = equal.as_deref().and_then(|v| from_index(LABEL_INDEX, v)) {
            return found;
        }
        if let Some(found) = namespace.and_then(|ns| from_index(NAMESPACE_INDEX, ns)) {
            return found;
        }
        inner.objects().filter(keep).cloned().collect()
    }

    /// Objects filed under `value` in index `index` (client-go `ByIndex`).
    pub fn by_index(&self, index: &str, value: &str) -> Result<Vec<Arc<CachedObject>>> {
        let inner = self.inner.read();
        let idx = inner.index(index)?;
        Ok(idx.get(value).into_iter().flatten().filter_map(|k| inner.object(k)).cloned().collect())
    }

    /// Keys filed under `value` in index `index` (client-go `IndexKeys`).
    pub fn index_keys(&self, index: &str, value: &str) -> Result<Vec<String>> {
        let inner = self.inner.read();
        let idx = inner.index(index)?;
        Ok(idx.get(value).into_iter().flatten().map(|k| k.to_string()).collect())
    }

    /// Every value of index `index` that has at least one object (client-go `ListIndexFuncValues`).
    pub fn list_index_values(&self, index: &str) -> Result<Vec<String>> {
        Ok(self.inner.read().index(index)?.keys().cloned().collect())
    }

    /// Approximate heap bytes of the cache: every object's [`CachedObject::heap_size`] plus
    /// the map and index entries pointing at it (hash table slots, not allocator overhead).
    pub fn approx_heap_bytes(&self) -> usize {
        const SLOT: usize = std::mem::size_of::<Item>() + 1;
        const INDEX_SLOT: usize = std::mem::size_of::<Arc<str>>() + 1;
        let inner = self.inner.read();
        let objects: usize = inner.objects().map(|o| o.heap_size()).sum::<usize>();
        let index_entries: usize = inner
            .indices
            .values()
            .flat_map(|idx| idx.iter())
            .map(|(value, keys)| value.len() + 48 + keys.capacity() * INDEX_SLOT)
            .sum();
        objects + inner.items.capacity() * SLOT + index_entries
    }

    /// Names of the registered indexes.
    pub fn index_names(&self) -> Vec<String> {
        self.inner.read().indexers.keys().cloned().collect()
    }

    /// Adds indexes, also after the informer started: existing objects are indexed at once
    /// (client-go `AddIndexers`, which refuses after start; we backfill instead).
    pub fn add_indexers(&self, indexers: Indexers) -> Result<()> {
        let mut inner = self.inner.write();
        if let Some(name) = indexers.keys().find(|n| inner.indexers.contains_key(*n)) {
            return Err(Error::IndexExists(name.clone()));
        }
        let needs_json = indexers.values().any(IndexFunc::needs_json);
        let mut built: HashMap<String, Index> = indexers.keys().map(|k| (k.clone(), Index::new())).collect();
        for Item(obj) in &inner.items {
            let key = obj.key_arc();
            let parsed = parse_if(needs_json, obj);
            for (name, f) in &indexers {
                let idx = built.get_mut(name).expect("built has every new index");
                for v in f.values(obj, parsed.as_ref()) {
                    idx.entry(v).or_default().insert(key.clone());
                }
            }
        }
        inner.indices.extend(built);
        inner.indexers.extend(indexers);
        Ok(())
    }

    /// Removes indexes by name (a plugin version that added them is gone); unknown names are
    /// ignored. The built-in indexes can be removed too, so callers name only their own.
    pub fn remove_indexers<'a>(&self, names: impl IntoIterator<Item = &'a str>) {
        let mut inner = self.inner.write();
        for name in names {
            inner.indexers.remove(name);
            inner.indices.remove(name);
        }
    }

    /// Inserts or replaces an object, updating every index; returns the previous version.
    /// Used by the reflector; public so cache readers can be tested without an API server.
    pub fn upsert(&self, obj: Arc<CachedObject>) -> Option<Arc<CachedObject>> {
        let mut inner = self.inner.write();
        let old = inner.items.replace(Item(obj.clone())).map(|item| item.0);
        inner.update_indices(obj.key_arc(), old.as_deref(), Some(&obj));
        old
    }

    /// Removes the object with `key`, updating every index; returns it if it was cached.
    pub fn delete(&self, key: &str) -> Option<Arc<CachedObject>> {
        let mut inner = self.inner.write();
        let Item(old) = inner.items.take(key)?;
        inner.update_indices(old.key_arc(), Some(&old), None);
        Some(old)
    }

    /// Removes every cached object whose key is not in `keep`, returning the removed objects
    /// (the relist case: their deletion was missed while the watch was down).
    pub fn retain_keys(&self, keep: &HashSet<Arc<str>>) -> Vec<Arc<CachedObject>> {
        let gone: Vec<Arc<str>> = {
            let inner = self.inner.read();
            inner.objects().map(|o| o.key_arc()).filter(|k| !keep.contains(*k)).cloned().collect()
        };
        gone.iter().filter_map(|k| self.delete(k)).collect()
    }
}

impl Inner {
    /// The cached object with `key`.
    fn object(&self, key: &str) -> Option<&Arc<CachedObject>> {
        self.items.get(key).map(|item| &item.0)
    }

    /// Every cached object.
    fn objects(&self) -> impl Iterator<Item = &Arc<CachedObject>> {
        self.items.iter().map(|item| &item.0)
    }

    fn index(&self, name: &str) -> Result<&Index> {
        self.indices.get(name).ok_or_else(|| Error::IndexNotFound(name.to_owned()))
    }

    fn update_indices(&mut self, key: &Arc<str>, old: Option<&CachedObject>, new: Option<&CachedObject>) {
        let needs_json = self.indexers.values().any(IndexFunc::needs_json);
        let old_parsed = old.and_then(|o| parse_if(needs_json, o));
        let new_parsed = new.and_then(|o| parse_if(needs_json, o));
        for (name, f) in &self.indexers {
            let old_values = old.map(|o| f.values(o, old_parsed.as_ref())).unwrap_or_default();
            let new_values = new.map(|o| f.values(o, new_parsed.as_ref())).unwrap_or_default();
            if old_values == new_values {
                continue;
            }
            let idx = self.indices.entry(name.clone()).or_default();
            for v in old_values.iter().filter(|v| !new_values.contains(v)) {
                if let Some(set) = idx.get_mut(v) {
                    set.remove(key);
                    if set.is_empty() {
                        idx.remove(v);
                    }
                }
            }
            for v in new_values {
                idx.entry(v).or_default().insert(key.clone());
            }
        }
    }
}

fn parse_if(needed: bool, obj: &CachedObject) -> Option<Value> {
    if needed { obj.value().ok() } else { None }
}

#[cfg(test)]
#[path = "store_tests.rs"]
mod tests;
