//! configmap-sync: reconciles `ConfigMapSync` objects (`examples.kubewasm.dev/v1alpha1`,
//! cluster-scoped, CRD in `deploy/crds/examples/configmapsync.yaml`). Each copies `spec.source` into every
//! namespace matching `spec.namespaceSelector`, follows namespaces that appear later and source
//! changes, reports `status.syncedCount` and a `Ready` condition, and removes its copies through
//! a finalizer when deleted. Needs a grant to write `ConfigMapSync.examples.kubewasm.dev` (for
//! the finalizer).

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kubewasm_sdk::{Action, Error, Gvk, ObjectKey, Reconciler, Registration, Request, Result, cache, client};
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

fn finalizers(sync: &Value) -> Vec<String> {
    let list = sync.pointer("/metadata/finalizers").and_then(Value::as_array);
    list.into_iter().flatten().filter_map(|f| f.as_str().map(str::to_owned)).collect()
}

fn set_finalizers(name: &str, list: Vec<String>) -> Result<()> {
    let patch = json!({"metadata": {"finalizers": list}});
    client::patch_json(&sync_kind(), None, name, client::PatchType::Merge, &patch).map(drop)
}

fn copies(name: &str) -> Result<Vec<ConfigMap>> {
    cache::list::<ConfigMap>(None, Some(&format!("{SYNC_LABEL}={name}")))
}

fn status(sync: &Value, synced: usize, ready: bool, reason: &str, message: &str) -> Result<()> {
    let name = text(sync, "/metadata/name").unwrap_or_default();
    let body = json!({
        "apiVersion": "examples.kubewasm.dev/v1alpha1", "kind": "ConfigMapSync", "metadata": {"name": name},
        "status": {
            "observedGeneration": sync.pointer("/metadata/generation"),
            "syncedCount": synced,
            "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }, "reason": reason, "message": message}],
        },
    });
    client::apply_status_json(&body).map(drop)
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
        let mut fins = finalizers(&sync);
        if sync.pointer("/metadata/deletionTimestamp").is_some() {
            if fins.iter().any(|f| f == FINALIZER) {
                for copy in copies(name)? {
                    client::delete::<ConfigMap>(
                        copy.metadata.namespace.as_deref(),
                        copy.metadata.name.as_deref().unwrap_or_default(),
                    )?;
                }
                fins.retain(|f| f != FINALIZER);
                set_finalizers(name, fins)?;
            }
            return Ok(Action::Done);
        }
        if !fins.iter().any(|f| f == FINALIZER) {
            fins.push(FINALIZER.into());
            set_finalizers(name, fins)?;
        }

        let (Some(src_ns), Some(src_name)) = (text(&sync, "/spec/source/namespace"), text(&sync, "/spec/source/name"))
        else {
            status(&sync, 0, false, "InvalidSpec", "spec.source needs namespace and name")?;
            return Ok(Action::Done);
        };
        let selector = text(&sync, "/spec/namespaceSelector").unwrap_or_default();
        let Some(source) = cache::get::<ConfigMap>(Some(src_ns), src_name)? else {
            status(&sync, 0, false, "SourceNotFound", &format!("ConfigMap {src_ns}/{src_name} does not exist"))?;
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
                            "uid": text(&sync, "/metadata/uid"), "controller": true, "blockOwnerDeletion": true}]);
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
                client::delete::<ConfigMap>(
                    stale.metadata.namespace.as_deref(),
                    stale.metadata.name.as_deref().unwrap_or_default(),
                )?;
            }
        }
        let message = format!("{src_ns}/{src_name} copied to {} namespaces", targets.len());
        status(&sync, targets.len(), true, "Synced", &message)?;
        Ok(Action::Done)
    }

    fn map(kind: Gvk, object: &[u8]) -> Vec<ObjectKey> {
        let syncs: Vec<Value> = cache::list_as(&sync_kind(), None, None).unwrap_or_default();
        let key = |s: &Value| text(s, "/metadata/name").map(|n| ObjectKey { namespace: None, name: n.to_owned() });
        if kind.kind == "Namespace" {
            return syncs.iter().filter_map(key).collect();
        }
        // A ConfigMap: the syncs whose source it is.
        let Ok(cm) = serde_json::from_slice::<Value>(object) else { return Vec::new() };
        let (ns, name) = (text(&cm, "/metadata/namespace"), text(&cm, "/metadata/name"));
        syncs
            .iter()
            .filter(|s| text(s, "/spec/source/namespace") == ns && text(s, "/spec/source/name") == name)
            .filter_map(key)
            .collect()
    }
}

kubewasm_sdk::export_reconciler!(ConfigMapSync);
