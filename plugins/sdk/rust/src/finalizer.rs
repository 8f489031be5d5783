//! Finalizers: run a cleanup before an object goes, and let it go only once the cleanup
//! succeeded (kube-runtime's `finalizer`, controller-runtime's `controllerutil` finalizer
//! helpers).
//!
//! Every finalizer write carries the object's resourceVersion and uid as preconditions: the
//! finalizer list is written whole (a merge patch replaces lists), so without them a write
//! decided on a cached copy could drop a finalizer another controller added meanwhile, or touch
//! a new object of the same name. A failed precondition is [`Error::Conflict`](crate::Error),
//! retried with backoff after the cache caught up.

use serde_json::{Value, json};

use crate::client::{self, PatchType, Preconditions};
use crate::{Action, Gvk, Result};

/// What [`finalize`] asks its closure to do.
#[derive(Debug)]
pub enum Event<'a> {
    /// The object lives (and carries the finalizer): reconcile it.
    Apply(&'a Value),
    /// The object is being deleted and still carries the finalizer: clean up what it owns
    /// outside Kubernetes' garbage collection. On `Ok`, the finalizer is removed.
    Cleanup(&'a Value),
}

/// The finalizers of an object.
pub fn finalizers(object: &Value) -> Vec<String> {
    let list = object.pointer("/metadata/finalizers").and_then(Value::as_array);
    list.into_iter().flatten().filter_map(|f| f.as_str().map(str::to_owned)).collect()
}

/// Whether `object` carries `finalizer`.
pub fn has(object: &Value, finalizer: &str) -> bool {
    finalizers(object).iter().any(|f| f == finalizer)
}

/// Whether `object` is being deleted (has a `deletionTimestamp`): Python's
/// `finalizers.is_deleting`, JavaScript's `isDeleting`, Go's `IsDeleting`.
pub fn is_deleting(object: &Value) -> bool {
    object.pointer("/metadata/deletionTimestamp").is_some_and(|t| !t.is_null())
}

fn preconditions(object: &Value) -> Preconditions {
    client::as_read_json(object)
}

fn write(kind: &Gvk, object: &Value, list: Vec<String>) -> Result<Value> {
    let text = |p: &str| object.pointer(p).and_then(Value::as_str);
    let name = text("/metadata/name").unwrap_or_default();
    let patch = json!({"metadata": {"finalizers": list}});
    client::patch_json_if(kind, text("/metadata/namespace"), name, PatchType::Merge, &patch, &preconditions(object))
}

/// Adds `finalizer` to `object` (of `kind`, as read) unless it has it; returns the object as
/// stored. A conflict if the object changed since it was read.
pub fn add(kind: &Gvk, object: &Value, finalizer: &str) -> Result<Value> {
    let mut list = finalizers(object);
    if list.iter().any(|f| f == finalizer) {
        return Ok(object.clone());
    }
    list.push(finalizer.to_owned());
    write(kind, object, list)
}

/// Removes `finalizer` from `object` (of `kind`, as read) if it has it; returns the object as
/// stored (which may be gone, then `Ok(Value::Null)`). A conflict if the object changed since.
pub fn remove(kind: &Gvk, object: &Value, finalizer: &str) -> Result<Value> {
    let mut list = finalizers(object);
    if !list.iter().any(|f| f == finalizer) {
        return Ok(object.clone());
    }
    list.retain(|f| f != finalizer);
    match write(kind, object, list) {
        Err(crate::Error::NotFound) => Ok(Value::Null),
        other => other,
    }
}

/// Runs `reconcile` with the finalizer in place: a live object without `finalizer` gets it
/// first (then `reconcile` sees [`Event::Apply`] on the stored object); an object being deleted
/// that carries it gets [`Event::Cleanup`], and the finalizer is removed once that succeeded;
/// one being deleted without it is left alone.
pub fn finalize(
    kind: &Gvk,
    object: &Value,
    finalizer: &str,
    reconcile: impl FnOnce(Event<'_>) -> Result<Action>,
) -> Result<Action> {
    match (is_deleting(object), has(object, finalizer)) {
        (false, true) => reconcile(Event::Apply(object)),
        (false, false) => {
            let stored = add(kind, object, finalizer)?;
            reconcile(Event::Apply(&stored))
        }
        (true, true) => {
            let action = reconcile(Event::Cleanup(object))?;
            remove(kind, object, finalizer)?;
            Ok(action)
        }
        (true, false) => Ok(Action::Done),
    }
}
