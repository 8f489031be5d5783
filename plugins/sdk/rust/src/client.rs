//! Writes through the host (server-side apply with field manager `kubewasm/<plugin>`).

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::bindings::kubewasm::controller::client as host;
pub use crate::bindings::kubewasm::controller::client::{DeleteOptions, PatchType, Preconditions, PropagationPolicy};
use crate::{Gvk, Result, gvk};

/// No preconditions.
pub fn unconditionally() -> Preconditions {
    Preconditions { resource_version: None, uid: None }
}

/// Preconditions naming `meta`'s object exactly as read: its uid and resourceVersion. A write
/// with them fails with a conflict if anything changed the object since.
pub fn as_read(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> Preconditions {
    Preconditions { resource_version: meta.resource_version.clone(), uid: meta.uid.clone() }
}

/// [`as_read`] for untyped JSON objects.
pub fn as_read_json(object: &Value) -> Preconditions {
    let text = |p: &str| object.pointer(p).and_then(Value::as_str).map(str::to_owned);
    Preconditions { resource_version: text("/metadata/resourceVersion"), uid: text("/metadata/uid") }
}

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

/// Server-side applies the status of `object`, without taking over status fields another
/// manager owns (a conflict then); see [`apply_status_forced`].
pub fn apply_status<K: Serialize + DeserializeOwned>(object: &K) -> Result<K> {
    parse(&host::apply_status(&bytes(object)?, false)?)
}

/// [`apply_status`], taking ownership of conflicting status fields (0.1's only behaviour).
pub fn apply_status_forced<K: Serialize + DeserializeOwned>(object: &K) -> Result<K> {
    parse(&host::apply_status(&bytes(object)?, true)?)
}

/// Server-side applies untyped JSON (e.g. a CRD object); returns the stored object.
pub fn apply_json(object: &Value, force: bool) -> Result<Value> {
    parse(&host::apply(&bytes(object)?, force)?)
}

/// Server-side applies the status of an untyped object; `force` as for [`apply_json`].
pub fn apply_status_json(object: &Value, force: bool) -> Result<Value> {
    parse(&host::apply_status(&bytes(object)?, force)?)
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
    parse(&host::patch(&gvk::<K>(), namespace, name, PatchType::Merge, &bytes(patch)?, &unconditionally())?)
}

/// Patches an object of `K` with a JSON merge patch if it meets `preconditions` (a conflict
/// otherwise).
pub fn merge_patch_if<K: k8s_openapi::Resource + DeserializeOwned>(
    namespace: Option<&str>,
    name: &str,
    patch: &Value,
    preconditions: &Preconditions,
) -> Result<K> {
    parse(&host::patch(&gvk::<K>(), namespace, name, PatchType::Merge, &bytes(patch)?, preconditions)?)
}

/// Patches the status of an object of `K` with a JSON merge patch if it meets `preconditions`
/// (controller-runtime's `Status().Patch`).
pub fn merge_patch_status<K: k8s_openapi::Resource + DeserializeOwned>(
    namespace: Option<&str>,
    name: &str,
    patch: &Value,
    preconditions: &Preconditions,
) -> Result<K> {
    parse(&host::patch_status(&gvk::<K>(), namespace, name, PatchType::Merge, &bytes(patch)?, preconditions)?)
}

/// Patches any object with a patch of the given type; returns the stored object as JSON.
pub fn patch_json(
    kind: &Gvk,
    namespace: Option<&str>,
    name: &str,
    kind_of_patch: PatchType,
    patch: &Value,
) -> Result<Value> {
    patch_json_if(kind, namespace, name, kind_of_patch, patch, &unconditionally())
}

/// [`patch_json`] if the object meets `preconditions`.
pub fn patch_json_if(
    kind: &Gvk,
    namespace: Option<&str>,
    name: &str,
    kind_of_patch: PatchType,
    patch: &Value,
    preconditions: &Preconditions,
) -> Result<Value> {
    parse(&host::patch(kind, namespace, name, kind_of_patch, &bytes(patch)?, preconditions)?)
}

/// Patches the status of any object; returns the stored object as JSON.
pub fn patch_status_json(
    kind: &Gvk,
    namespace: Option<&str>,
    name: &str,
    kind_of_patch: PatchType,
    patch: &Value,
    preconditions: &Preconditions,
) -> Result<Value> {
    parse(&host::patch_status(kind, namespace, name, kind_of_patch, &bytes(patch)?, preconditions)?)
}

/// Deletes an object of `K`; an object already gone is not an error.
pub fn delete<K: k8s_openapi::Resource>(namespace: Option<&str>, name: &str) -> Result<()> {
    delete_as(&gvk::<K>(), namespace, name)
}

/// Deletes an object of any kind (background propagation, no preconditions); an object
/// already gone is not an error.
pub fn delete_as(kind: &Gvk, namespace: Option<&str>, name: &str) -> Result<()> {
    let options = DeleteOptions { preconditions: unconditionally(), propagation_policy: None };
    delete_with(kind, namespace, name, &options)
}

/// Deletes an object of any kind as `options` say (preconditions, propagation policy); an
/// object already gone is not an error, a failed precondition is a conflict.
pub fn delete_with(kind: &Gvk, namespace: Option<&str>, name: &str, options: &DeleteOptions) -> Result<()> {
    match host::delete(kind, namespace, name, options) {
        Ok(()) | Err(crate::bindings::kubewasm::controller::types::Error::NotFound) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Reads an object of `K` from the API server, bypassing the cache (controller-runtime's
/// `APIReader`): for reads that must see a write the cache may not have yet. Costs an API call.
pub fn get<K: k8s_openapi::Resource + DeserializeOwned>(namespace: Option<&str>, name: &str) -> Result<Option<K>> {
    host::get(&gvk::<K>(), namespace, name)?.map(|b| parse(&b)).transpose()
}

/// [`get`] for any kind, as JSON.
pub fn get_json(kind: &Gvk, namespace: Option<&str>, name: &str) -> Result<Option<Value>> {
    host::get(kind, namespace, name)?.map(|b| parse(&b)).transpose()
}
