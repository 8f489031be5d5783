//! config-reloader: rolls a Deployment when a ConfigMap its pod template uses changes, by
//! stamping a hash of the referenced ConfigMaps' data on the pod template (what Reloader-style
//! tools do).
//!
//! Opt-in: only Deployments labelled `kubewasm.dev/reload=true`. For Deployment, Watches
//! ConfigMap: a changed ConfigMap maps to the Deployments that reference it through the host's
//! `pod-template-configmaps` index. Needs a grant to write `Deployment.apps`.

use std::collections::BTreeSet;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, PodSpec};
use kubewasm_sdk::{Action, Gvk, IndexSource, ObjectKey, Reconciler, Registration, Request, Result, cache, client};
use serde_json::json;
use sha2::{Digest, Sha256};

/// The pod-template annotation carrying the hash.
pub const HASH_ANNOTATION: &str = "kubewasm.dev/config-hash";
/// The index over Deployments: `namespace/name` of each referenced ConfigMap.
const INDEX: &str = "configmaps";

/// Names of the ConfigMaps a pod spec references (volumes, projected volumes, env, envFrom).
pub fn referenced_configmaps(pod: &PodSpec) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for volume in pod.volumes.iter().flatten() {
        names.extend(volume.config_map.as_ref().map(|c| c.name.clone()));
        let sources = volume.projected.as_ref().and_then(|p| p.sources.as_ref());
        names.extend(sources.into_iter().flatten().filter_map(|s| s.config_map.as_ref().map(|c| c.name.clone())));
    }
    for container in pod.containers.iter().chain(pod.init_containers.iter().flatten()) {
        for env in container.env.iter().flatten() {
            let key_ref = env.value_from.as_ref().and_then(|v| v.config_map_key_ref.as_ref());
            names.extend(key_ref.map(|k| k.name.clone()));
        }
        for from in container.env_from.iter().flatten() {
            names.extend(from.config_map_ref.as_ref().map(|c| c.name.clone()));
        }
    }
    names
}

/// A hash over the names and data of `configmaps` (missing ones count as absent).
pub fn config_hash(configmaps: &[(String, Option<ConfigMap>)]) -> String {
    let mut hash = Sha256::new();
    for (name, cm) in configmaps {
        hash.update(name.as_bytes());
        let body = cm.as_ref().map(|c| json!({"data": c.data, "binaryData": c.binary_data}));
        hash.update(serde_json::to_vec(&body).unwrap_or_default());
    }
    hex::encode(&hash.finalize()[..16])
}

/// Whether a Deployment asked for reloads (`kubewasm.dev/reload=true`, the for selector).
fn opted_in(d: &Deployment) -> bool {
    d.metadata.labels.as_ref().and_then(|l| l.get("kubewasm.dev/reload")).is_some_and(|v| v == "true")
}

struct ConfigReloader;

impl Reconciler for ConfigReloader {
    fn describe() -> Registration {
        Registration::reconciles::<Deployment>()
            .selector("kubewasm.dev/reload=true")
            .watches::<ConfigMap>()
            .writes::<Deployment>()
            .index::<Deployment>(INDEX, IndexSource::Builtin("pod-template-configmaps".into()))
    }

    fn reconcile(request: Request) -> Result<Action> {
        let ns = request.namespace.as_deref();
        let Some(deployment) = cache::get::<Deployment>(ns, &request.name)? else { return Ok(Action::Done) };
        if !opted_in(&deployment) {
            return Ok(Action::Done);
        }
        let template = &deployment.spec.template;
        let Some(pod) = template.spec.as_ref() else { return Ok(Action::Done) };
        let mut configmaps = Vec::new();
        for name in referenced_configmaps(pod) {
            let cm = cache::get::<ConfigMap>(ns, &name)?;
            configmaps.push((name, cm));
        }
        let hash = config_hash(&configmaps);
        let current =
            template.metadata.as_ref().and_then(|m| m.annotations.as_ref()).and_then(|a| a.get(HASH_ANNOTATION));
        if current != Some(&hash) {
            let patch = json!({"spec": {"template": {"metadata": {"annotations": {HASH_ANNOTATION: hash}}}}});
            client::merge_patch::<Deployment>(ns, &request.name, &patch)?;
            kubewasm_sdk::info!("stamped {HASH_ANNOTATION}={hash} on {}", request.name);
        }
        Ok(Action::Done)
    }

    fn map(_: Gvk, object: &[u8]) -> Result<Vec<ObjectKey>> {
        let cm = serde_json::from_slice::<ConfigMap>(object)?;
        let (Some(ns), Some(name)) = (cm.metadata.namespace, cm.metadata.name) else { return Ok(Vec::new()) };
        // The cache holds every Deployment (0.2 selectors filter triggers only): keep the opted-in.
        let users = cache::by_index::<Deployment>(INDEX, &format!("{ns}/{name}"))?;
        Ok(users
            .into_iter()
            .filter(opted_in)
            .filter_map(|d| Some(ObjectKey { namespace: d.metadata.namespace, name: d.metadata.name? }))
            .collect())
    }
}

kubewasm_sdk::export_reconciler!(ConfigReloader);
