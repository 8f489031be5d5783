//! Writes through the host (server-side apply with field manager `kubewasm/<plugin>`).

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::bindings::kubewasm::controller::client as host;
pub use crate::bindings::kubewasm::controller::client::PatchType;
use crate::{Gvk, Result, gvk};

fn bytes<T: Serialize>(object: &T) -> Result<Vec<u8>> {
    Ok(serde_json::to_vec(object)?)
}

fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T> {
    Ok(serde_json::from_slice(bytes)?)
}

/// Server-side applies `object` (k8s-openapi types carry apiVersion and kind); returns the
/// stored object. Does not force conflicting fields; see [`apply_forced`].
pub fn apply<K: Serialize + DeserializeOwned>(object: &K) -> Result<K> {
    parse(&host::apply(&bytes(object)?, false)?)
}

/// [`apply`], taking ownership of fields other managers set.
pub fn apply_forced<K: Serialize + DeserializeOwned>(object: &K) -> Result<K> {
    parse(&host::apply(&bytes(object)?, true)?)
}

/// Server-side applies the status of `object`.
pub fn apply_status<K: Serialize + DeserializeOwned>(object: &K) -> Result<K> {
    parse(&host::apply_status(&bytes(object)?)?)
}

/// Server-side applies untyped JSON (e.g. a CRD object); returns the stored object.
pub fn apply_json(object: &Value, force: bool) -> Result<Value> {
    parse(&host::apply(&bytes(object)?, force)?)
}

/// Server-side applies the status of an untyped object.
pub fn apply_status_json(object: &Value) -> Result<Value> {
    parse(&host::apply_status(&bytes(object)?)?)
}

/// Creates `object`.
pub fn create<K: Serialize + DeserializeOwned>(object: &K) -> Result<K> {
    parse(&host::create(&bytes(object)?)?)
}

/// Patches an object of `K` with a JSON merge patch.
pub fn merge_patch<K: k8s_openapi::Resource + DeserializeOwned>(
    namespace: Option<&str>,
    name: &str,
    patch: &Value,
) -> Result<K> {
    parse(&host::patch(&gvk::<K>(), namespace, name, PatchType::Merge, &bytes(patch)?)?)
}

/// Patches any object with a patch of the given type; returns the stored object as JSON.
pub fn patch_json(
    kind: &Gvk,
    namespace: Option<&str>,
    name: &str,
    kind_of_patch: PatchType,
    patch: &Value,
) -> Result<Value> {
    parse(&host::patch(kind, namespace, name, kind_of_patch, &bytes(patch)?)?)
}

/// Deletes an object of `K`; an object already gone is not an error.
pub fn delete<K: k8s_openapi::Resource>(namespace: Option<&str>, name: &str) -> Result<()> {
    delete_as(&gvk::<K>(), namespace, name)
}

/// Deletes an object of any kind; an object already gone is not an error.
pub fn delete_as(kind: &Gvk, namespace: Option<&str>, name: &str) -> Result<()> {
    match host::delete(kind, namespace, name) {
        Ok(()) | Err(crate::bindings::kubewasm::controller::types::Error::NotFound) => Ok(()),
        Err(e) => Err(e.into()),
    }
}
