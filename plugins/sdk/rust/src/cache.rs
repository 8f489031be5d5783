//! Typed reads of the host's informer cache (local; never an API call).

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::bindings::kubewasm::controller::cache as host;
use crate::{Gvk, Result, gvk};

fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T> {
    Ok(serde_json::from_slice(bytes)?)
}

/// The cached object `name` (in `namespace`, `None` for cluster-scoped kinds), if any.
pub fn get<K: k8s_openapi::Resource + DeserializeOwned>(namespace: Option<&str>, name: &str) -> Result<Option<K>> {
    get_as(&gvk::<K>(), namespace, name)
}

/// Cached objects of `K`, optionally in one namespace and matching a label selector.
pub fn list<K: k8s_openapi::Resource + DeserializeOwned>(
    namespace: Option<&str>,
    label_selector: Option<&str>,
) -> Result<Vec<K>> {
    list_as(&gvk::<K>(), namespace, label_selector)
}

/// Cached objects of `K` whose index `index` has `value` (`namespace`, `label` as `key=value`,
/// `controller-owner` as a UID, or a custom index from the registration).
pub fn by_index<K: k8s_openapi::Resource + DeserializeOwned>(index: &str, value: &str) -> Result<Vec<K>> {
    by_index_as(&gvk::<K>(), index, value)
}

/// [`get`] for any kind, deserialized into `T` (e.g. `serde_json::Value` for a CRD).
pub fn get_as<T: DeserializeOwned>(kind: &Gvk, namespace: Option<&str>, name: &str) -> Result<Option<T>> {
    host::get(kind, namespace, name)?.map(|b| parse(&b)).transpose()
}

/// [`list`] for any kind.
pub fn list_as<T: DeserializeOwned>(
    kind: &Gvk,
    namespace: Option<&str>,
    label_selector: Option<&str>,
) -> Result<Vec<T>> {
    host::list(kind, namespace, label_selector)?.iter().map(|b| parse(b)).collect()
}

/// [`by_index`] for any kind.
pub fn by_index_as<T: DeserializeOwned>(kind: &Gvk, index: &str, value: &str) -> Result<Vec<T>> {
    host::by_index(kind, index, value)?.iter().map(|b| parse(b)).collect()
}

/// [`get`] as untyped JSON.
pub fn get_json(kind: &Gvk, namespace: Option<&str>, name: &str) -> Result<Option<Value>> {
    get_as(kind, namespace, name)
}
