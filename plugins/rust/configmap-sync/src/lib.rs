//! configmap-sync: reconciles `ConfigMapSync` objects (`examples.kubewasm.dev/v1alpha1`,
//! cluster-scoped, CRD in `deploy/crds/examples/configmapsync.yaml`). Each copies `spec.source` into every
//! namespace matching `spec.namespaceSelector`, follows namespaces that appear later and source
//! changes, reports `status.syncedCount` and a `Ready` condition, and removes its copies through
//! a finalizer when deleted. Needs a grant to write `ConfigMapSync.examples.kubewasm.dev` (for
//! the finalizer). The finalizer is added and removed with the object's resourceVersion and uid
//! as preconditions (`kubewasm_sdk::finalizer`), and copies are deleted only if they are still
//! the objects read (uid precondition).

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kubewasm_sdk::finalizer::{self, Event};
use kubewasm_sdk::{
    Action, Error, Gvk, ObjectKey, Reconciler, Registration, Request, Result, cache, client, conditions, gvk,
};
use serde_json::{Value, json};

/// Finalizer that removes the copies before the ConfigMapSync goes.
pub const FINALIZER: &str = "examples.kubewasm.dev/cleanup";
/// Label on every copy, naming its ConfigMapSync.
pub const SYNC_LABEL: &str = "examples.kubewasm.dev/sync";

fn sync_kind() -> Gvk {
    Gvk { group: "examples.kubewasm.dev".into(), version: "v1alpha1".into(), kind: "ConfigMapSync".into() }
}

fn text<'a>(v: &'a Value, pointer: &str) -> Option<&'a str> {
    v.pointer(pointer).and_then(Value::as_str)
}

fn copies(name: &str) -> Result<Vec<ConfigMap>> {
    cache::list::<ConfigMap>(None, Some(&format!("{SYNC_LABEL}={name}")))
}

/// Deletes `copy` if it is still the object read (its uid): never a ConfigMap recreated since.
fn delete_copy(copy: &ConfigMap) -> Result<()> {
    let meta = &copy.metadata;
    let preconditions = client::Preconditions { resource_version: None, uid: meta.uid.clone() };
    let options = client::DeleteOptions { preconditions, propagation_policy: None };
    client::delete_with(
        &gvk::<ConfigMap>(),
        meta.namespace.as_deref(),
        meta.name.as_deref().unwrap_or_default(),
        &options,
    )
}

fn status(sync: &Value, synced: usize, ready: bool, reason: &str, message: &str) -> Result<()> {
    let name = text(sync, "/metadata/name").unwrap_or_default();
    let mut conds: Vec<Condition> =
        sync.pointer("/status/conditions").map(|c| serde_json::from_value(c.clone())).transpose()?.unwrap_or_default();
    let generation = sync.pointer("/metadata/generation").and_then(Value::as_i64);
    let changed = conditions::set(&mut conds, conditions::new("Ready", ready, reason, message, generation));
    let synced_before = sync.pointer("/status/syncedCount").and_then(Value::as_u64);
    let observed = sync.pointer("/status/observedGeneration").and_then(Value::as_i64);
    if !changed && synced_before == Some(synced as u64) && observed == generation {
        return Ok(());
    }
    let body = json!({
        "apiVersion": "examples.kubewasm.dev/v1alpha1", "kind": "ConfigMapSync", "metadata": {"name": name},
        "status": {"observedGeneration": generation, "syncedCount": synced, "conditions": conds},
    });
    client::apply_status_json(&body, false).map(drop)
}

struct ConfigMapSync;

impl Reconciler for ConfigMapSync {
    fn describe() -> Registration {
        Registration::reconciles_kind(sync_kind())
            .owns::<ConfigMap>()
            .watches::<Namespace>()
            .watches::<ConfigMap>()
            .writes_kind(sync_kind())
    }

    fn reconcile(request: Request) -> Result<Action> {
        let name = request.name.as_str();
        let Some(sync) = cache::get_json(&sync_kind(), None, name)? else { return Ok(Action::Done) };
        finalizer::finalize(&sync_kind(), &sync, FINALIZER, |event| match event {
            Event::Cleanup(_) => {
                copies(name)?.iter().try_for_each(delete_copy)?;
                Ok(Action::Done)
            }
            Event::Apply(sync) => sync_copies(name, sync),
        })
    }

    fn map(kind: Gvk, object: &[u8]) -> Result<Vec<ObjectKey>> {
        let syncs: Vec<Value> = cache::list_as(&sync_kind(), None, None)?;
        let key = |s: &Value| text(s, "/metadata/name").map(|n| ObjectKey { namespace: None, name: n.to_owned() });
        if kind.kind == "Namespace" {
            return Ok(syncs.iter().filter_map(key).collect());
        }
        // A ConfigMap: the syncs whose source it is.
        let cm = serde_json::from_slice::<Value>(object)?;
        let (ns, name) = (text(&cm, "/metadata/namespace"), text(&cm, "/metadata/name"));
        Ok(syncs
            .iter()
            .filter(|s| text(s, "/spec/source/namespace") == ns && text(s, "/spec/source/name") == name)
            .filter_map(key)
            .collect())
    }
}

/// Copies the source into every selected namespace, deletes copies no longer wanted, reports.
fn sync_copies(name: &str, sync: &Value) -> Result<Action> {
    let (Some(src_ns), Some(src_name)) = (text(sync, "/spec/source/namespace"), text(sync, "/spec/source/name")) else {
        let message = "spec.source needs namespace and name";
        status(sync, 0, false, "InvalidSpec", message)?;
        // Only an edit of the spec fixes this, and an edit triggers a reconcile: do not retry.
        return Err(Error::terminal(message));
    };
    let selector = text(sync, "/spec/namespaceSelector").unwrap_or_default();
    let Some(source) = cache::get::<ConfigMap>(Some(src_ns), src_name)? else {
        status(sync, 0, false, "SourceNotFound", &format!("ConfigMap {src_ns}/{src_name} does not exist"))?;
        return Ok(Action::Done);
    };
    let targets: Vec<String> = cache::list::<Namespace>(None, Some(selector))
        .map_err(|e| Error::msg(format!("namespaceSelector `{selector}`: {e}")))?
        .into_iter()
        .filter(|ns| ns.metadata.deletion_timestamp.is_none())
        .filter_map(|ns| ns.metadata.name)
        .filter(|ns| ns != src_ns)
        .collect();
    let owner = json!([{"apiVersion": "examples.kubewasm.dev/v1alpha1", "kind": "ConfigMapSync", "name": name,
                        "uid": text(sync, "/metadata/uid"), "controller": true, "blockOwnerDeletion": true}]);
    for ns in &targets {
        let copy = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": src_name, "namespace": ns, "labels": {SYNC_LABEL: name}, "ownerReferences": owner},
            "data": source.data, "binaryData": source.binary_data,
        });
        client::apply_json(&copy, true)?;
    }
    for stale in copies(name)? {
        if !stale.metadata.namespace.as_ref().is_some_and(|ns| targets.contains(ns)) {
            delete_copy(&stale)?;
        }
    }
    let message = format!("{src_ns}/{src_name} copied to {} namespaces", targets.len());
    status(sync, targets.len(), true, "Synced", &message)?;
    Ok(Action::Done)
}

kubewasm_sdk::export_reconciler!(ConfigMapSync);
