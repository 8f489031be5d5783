//! Handing what one plugin made over to another (`kubewasm handover`): the host's mark and the
//! plugin's field managers moved from one plugin name to another, by an operator.
//!
//! The host and the admission policy let a plugin change only what it made, so a plugin renamed,
//! or one that another plugin beat to a child's name, is locked out of those objects. Only a
//! person may move them (the policy matches plugin identities only): this relabels each object
//! marked `kubewasm.dev/plugin: <from>` to `<to>` and renames `<from>`'s field managers
//! (`kubewasm/<from>`, `kubewasm/<from>/canary`) in its managedFields, so the new owner's
//! server-side applies own the same fields without a conflict. Each object is patched with its
//! resourceVersion as a precondition; one changed meanwhile is reported, not overwritten.

use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use kube::discovery::{ApiCapabilities, ApiResource, Scope, verbs};
use kube::{Client, Discovery};
use serde_json::{Value, json};

use crate::plugin::api::PLUGIN_LABEL;
use crate::plugin::api::{FIELD_MANAGER_PREFIX, address};
use crate::plugin::grants::KindRef;

/// Why a handover could not start.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A plugin name that no plugin could have.
    #[error("`{0}` is not a plugin name: a plugin is named like a Kubernetes object (DNS-1123 label)")]
    Name(String),
    /// The API server's discovery failed.
    #[error("discovering the API server's kinds: {0}")]
    Discovery(kube::Error),
    /// A kind the API server does not serve.
    #[error("the API server does not serve {0}")]
    NotServed(KindRef),
}

/// What to hand over.
#[derive(Clone, Debug)]
pub struct Handover {
    /// The plugin whose objects they are now.
    pub from: String,
    /// The plugin they go to.
    pub to: String,
    /// Only these kinds; empty: every kind the API server serves that can be listed and patched.
    pub kinds: Vec<KindRef>,
    /// Only in this namespace (cluster-scoped objects are left alone); `None`: everywhere.
    pub namespace: Option<String>,
    /// List what would be handed over, change nothing.
    pub dry_run: bool,
}

/// One object found, and what became of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// `Kind.group namespace/name`.
    pub object: String,
    /// `None` once handed over (or, in a dry run, found); else why not.
    pub failed: Option<String>,
}

impl Handover {
    /// Hands every object `from` made (of the chosen kinds, in the chosen namespace) to `to`.
    pub async fn run(&self, client: &Client) -> Result<Vec<Outcome>, Error> {
        for name in [&self.from, &self.to] {
            if !address::is_label(name) {
                return Err(Error::Name(name.clone()));
            }
        }
        let mut outcomes = Vec::new();
        for (resource, caps) in self.resources(client).await? {
            let api: Api<DynamicObject> = match (&caps.scope, &self.namespace) {
                (Scope::Namespaced, Some(ns)) => Api::namespaced_with(client.clone(), ns, &resource),
                (Scope::Cluster, Some(_)) => continue,
                _ => Api::all_with(client.clone(), &resource),
            };
            let selector = format!("{PLUGIN_LABEL}={}", self.from);
            let listed = match api.list(&ListParams::default().labels(&selector)).await {
                Ok(list) => list.items,
                // A kind this operator may not list holds nothing it can hand over.
                Err(kube::Error::Api(status)) if status.code == 403 || status.code == 404 => continue,
                Err(e) => {
                    outcomes.push(Outcome { object: format!("{} (list)", resource.kind), failed: Some(e.to_string()) });
                    continue;
                }
            };
            for object in listed {
                outcomes.push(self.hand_over(client, &resource, &object).await);
            }
        }
        Ok(outcomes)
    }

    /// Hands one object over (in a dry run: only names it).
    async fn hand_over(&self, client: &Client, resource: &ApiResource, object: &DynamicObject) -> Outcome {
        let namespace = object.metadata.namespace.as_deref();
        let name = object.metadata.name.clone().unwrap_or_default();
        let kind = KindRef { group: resource.group.clone(), kind: resource.kind.clone() };
        let shown = format!("{kind} {}", crate::informer::ObjectKey::new(namespace, &name));
        if self.dry_run {
            return Outcome { object: shown, failed: None };
        }
        let api: Api<DynamicObject> = match namespace {
            Some(ns) => Api::namespaced_with(client.clone(), ns, resource),
            None => Api::all_with(client.clone(), resource),
        };
        let patch = Patch::Json::<()>(self.patch(object));
        let failed = api.patch(&name, &PatchParams::default(), &patch).await.err().map(|e| e.to_string());
        Outcome { object: shown, failed }
    }

    /// The resources to search: the chosen kinds, or every listable and patchable one.
    async fn resources(&self, client: &Client) -> Result<Vec<(ApiResource, ApiCapabilities)>, Error> {
        let discovery = Discovery::new(client.clone()).run().await.map_err(Error::Discovery)?;
        let mut found = Vec::new();
        for group in discovery.groups() {
            for (resource, caps) in group.recommended_resources() {
                let chosen = self.kinds.is_empty()
                    || self.kinds.iter().any(|k| k.group == resource.group && k.kind == resource.kind);
                if chosen && caps.supports_operation(verbs::LIST) && caps.supports_operation(verbs::PATCH) {
                    found.push((resource, caps));
                }
            }
        }
        if let Some(missing) =
            self.kinds.iter().find(|k| !found.iter().any(|(r, _)| r.group == k.group && r.kind == k.kind))
        {
            return Err(Error::NotServed(missing.clone()));
        }
        Ok(found)
    }

    /// A JSON patch that moves `object` to `to`, refused if the object changed since it was read.
    fn patch(&self, object: &DynamicObject) -> json_patch::Patch {
        let version = object.metadata.resource_version.clone().unwrap_or_default();
        let mut ops = vec![
            json!({"op": "test", "path": "/metadata/resourceVersion", "value": version}),
            json!({"op": "replace", "path": "/metadata/labels/kubewasm.dev~1plugin", "value": self.to}),
        ];
        if let Some(entries) = self.renamed_managers(object) {
            ops.push(json!({"op": "replace", "path": "/metadata/managedFields", "value": entries}));
        }
        serde_json::from_value(Value::Array(ops)).expect("a well-formed JSON patch")
    }

    /// `object`'s managedFields with `from`'s managers named as `to`'s; `None` when there is
    /// nothing to rename, or `to` already manages fields there (two entries of one manager are
    /// not merged: the new owner takes its fields over with its next forced apply).
    fn renamed_managers(&self, object: &DynamicObject) -> Option<Vec<Value>> {
        let entries = object.metadata.managed_fields.as_ref()?;
        let from = format!("{FIELD_MANAGER_PREFIX}{}", self.from);
        let to = format!("{FIELD_MANAGER_PREFIX}{}", self.to);
        let renamed = |manager: &str| {
            let rest = manager.strip_prefix(&from)?;
            (rest.is_empty() || rest.starts_with('/')).then(|| format!("{to}{rest}"))
        };
        let managers: Vec<&str> = entries.iter().filter_map(|e| e.manager.as_deref()).collect();
        let renames = managers.iter().any(|m| renamed(m).is_some());
        let clash = managers.iter().any(|m| *m == to || m.starts_with(&format!("{to}/")));
        if !renames || clash {
            return None;
        }
        let entries = entries.iter().map(|entry| {
            let mut entry = entry.clone();
            if let Some(new) = entry.manager.as_deref().and_then(renamed) {
                entry.manager = Some(new);
            }
            serde_json::to_value(entry).expect("a managedFields entry serializes")
        });
        Some(entries.collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn handover() -> Handover {
        Handover { from: "old".into(), to: "new".into(), kinds: vec![], namespace: None, dry_run: false }
    }

    fn object(managers: &[&str]) -> DynamicObject {
        let entries: Vec<Value> = managers
            .iter()
            .map(|m| {
                json!({"manager": m, "operation": "Apply", "apiVersion": "v1", "fieldsType": "FieldsV1",
                       "fieldsV1": {"f:data": {}}})
            })
            .collect();
        serde_json::from_value(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
            "name": "c", "namespace": "a", "resourceVersion": "7",
            "labels": {PLUGIN_LABEL: "old"}, "managedFields": entries}}))
        .unwrap()
    }

    #[test]
    fn the_patch_moves_the_mark_and_renames_the_old_plugins_managers_under_the_read_version() {
        let object = object(&["kubewasm/old", "kubewasm/old/canary", "kubectl"]);
        let patch = serde_json::to_value(handover().patch(&object)).unwrap();
        assert_eq!(patch[0], json!({"op": "test", "path": "/metadata/resourceVersion", "value": "7"}));
        assert_eq!(patch[1]["value"], json!("new"));
        let entries = patch[2]["value"].as_array().unwrap();
        let managers: Vec<&str> = entries.iter().map(|e| e["manager"].as_str().unwrap()).collect();
        assert_eq!(managers, ["kubewasm/new", "kubewasm/new/canary", "kubectl"]);
    }

    #[test]
    fn managers_of_another_plugin_or_of_the_new_owner_are_left_alone() {
        assert_eq!(handover().renamed_managers(&object(&["kubewasm/older", "kubewasm/other"])), None);
        let both = object(&["kubewasm/old", "kubewasm/new"]);
        assert_eq!(handover().renamed_managers(&both), None, "no two entries of one manager");
    }

    #[tokio::test]
    async fn a_name_no_plugin_could_have_is_refused_before_anything_is_asked() {
        type Mock = tower_test::mock::Mock<http::Request<kube::client::Body>, http::Response<kube::client::Body>>;
        let (service, _handle): (Mock, _) = tower_test::mock::pair();
        let client = Client::new(service, "default");
        let bad = Handover { to: "x,kubewasm.dev/plugin=evil".into(), ..handover() };
        assert!(matches!(bad.run(&client).await, Err(Error::Name(_))));
    }
}
