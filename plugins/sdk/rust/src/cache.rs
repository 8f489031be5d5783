//! Typed reads of the host's informer cache (local; never an API call).

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::bindings::kubewasm::controller::cache as host;
pub use crate::bindings::kubewasm::controller::cache::{ListOptions, ObjectList};
use crate::{Gvk, Result, gvk};

/// List options with nothing set: every object, one page. Fill the fields you need:
/// `ListOptions { limit: Some(100), ..cache::all() }`.
pub fn all() -> ListOptions {
    ListOptions { namespace: None, label_selector: None, field_selector: None, limit: None, continue_token: None }
}

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
    let options =
        ListOptions { namespace: namespace.map(Into::into), label_selector: label_selector.map(Into::into), ..all() };
    host::list(kind, &options)?.items.iter().map(|b| parse(b)).collect()
}

/// One page of the cached objects of `K` matching `options` (namespace, label and field
/// selectors, `limit`, `continue_token`), and the token of the next page.
pub fn list_page<K: k8s_openapi::Resource + DeserializeOwned>(
    options: &ListOptions,
) -> Result<(Vec<K>, Option<String>)> {
    list_page_as(&gvk::<K>(), options)
}

/// [`list_page`] for any kind.
pub fn list_page_as<T: DeserializeOwned>(kind: &Gvk, options: &ListOptions) -> Result<(Vec<T>, Option<String>)> {
    let page = host::list(kind, options)?;
    let items = page.items.iter().map(|b| parse(b)).collect::<Result<_>>()?;
    Ok((items, page.continue_token))
}

/// Calls `each` on every cached object of `K` matching `options`, a page of `options.limit`
/// at a time, so the plugin never holds more than one page.
pub fn for_each<K: k8s_openapi::Resource + DeserializeOwned>(
    options: &ListOptions,
    mut each: impl FnMut(K) -> Result<()>,
) -> Result<()> {
    let mut options = options.clone();
    loop {
        let (items, next) = list_page::<K>(&options)?;
        items.into_iter().try_for_each(&mut each)?;
        match next {
            Some(token) => options.continue_token = Some(token),
            None => return Ok(()),
        }
    }
}

/// [`by_index`] for any kind.
pub fn by_index_as<T: DeserializeOwned>(kind: &Gvk, index: &str, value: &str) -> Result<Vec<T>> {
    host::by_index(kind, index, value)?.iter().map(|b| parse(b)).collect()
}

/// [`get`] as untyped JSON.
pub fn get_json(kind: &Gvk, namespace: Option<&str>, name: &str) -> Result<Option<Value>> {
    get_as(kind, namespace, name)
}
