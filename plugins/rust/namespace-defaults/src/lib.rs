//! namespace-defaults: gives every Namespace a default ResourceQuota and a default-deny
//! NetworkPolicy, owned by the Namespace, unless the Namespace opts out with a label.
//!
//! Settings (all optional):
//! ```yaml
//! optOutLabel: kubewasm.dev/no-defaults   # a Namespace with this label (any value) is skipped
//! quotaName: default-quota
//! quota: { pods: "50", requests.cpu: "4", requests.memory: 8Gi }
//! networkPolicyName: default-deny
//! desiredState: false                    # true: return the children as the desired state
//! ```
//! When a Namespace opts out, defaults this plugin created there are removed. With
//! `desiredState`, the plugin says what should exist and the host applies both children at once
//! and prunes them on opt-out (contract 0.3); without it, the plugin writes and deletes them itself,
//! one request after another, as before 0.3: the same objects either way, so the benchmark can run
//! both modes side by side.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Namespace, ResourceQuota, ResourceQuotaSpec};
use k8s_openapi::api::networking::v1::{NetworkPolicy, NetworkPolicySpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use kubewasm_sdk::{Desired, DesiredState, Registration, Request, Result, cache, client, events};
use serde::Deserialize;

/// The plugin's settings.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct Settings {
    /// Namespaces carrying this label are skipped.
    pub opt_out_label: String,
    /// Name of the ResourceQuota.
    pub quota_name: String,
    /// `spec.hard` of the ResourceQuota.
    pub quota: BTreeMap<String, String>,
    /// Name of the NetworkPolicy.
    pub network_policy_name: String,
    /// Return the children as the desired state rather than writing them.
    pub desired_state: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            opt_out_label: "kubewasm.dev/no-defaults".into(),
            quota_name: "default-quota".into(),
            quota: [("pods", "50"), ("requests.cpu", "4"), ("requests.memory", "8Gi")]
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect(),
            network_policy_name: "default-deny".into(),
            desired_state: false,
        }
    }
}

/// Labels stamped on every object this plugin creates.
const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "kubewasm-namespace-defaults");

fn meta(name: &str, ns: &Namespace) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        namespace: ns.metadata.name.clone(),
        labels: Some([(MANAGED_BY.0.to_owned(), MANAGED_BY.1.to_owned())].into()),
        owner_references: Some(vec![kubewasm_sdk::controller_reference(ns)]),
        ..Default::default()
    }
}

/// The ResourceQuota for `ns`.
pub fn quota(settings: &Settings, ns: &Namespace) -> ResourceQuota {
    ResourceQuota {
        metadata: meta(&settings.quota_name, ns),
        spec: Some(ResourceQuotaSpec {
            hard: Some(settings.quota.iter().map(|(k, v)| (k.clone(), Quantity(v.clone()))).collect()),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The default-deny NetworkPolicy for `ns`: selects every pod, allows no ingress or egress.
pub fn network_policy(settings: &Settings, ns: &Namespace) -> NetworkPolicy {
    NetworkPolicy {
        metadata: meta(&settings.network_policy_name, ns),
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(LabelSelector::default()),
            policy_types: Some(vec!["Ingress".into(), "Egress".into()]),
            ..Default::default()
        }),
    }
}

/// Deletes `child` (as read from the cache) if this namespace controls it, and only if it is
/// still that object (uid precondition): never a same-named object created since.
fn delete_controlled<K>(child: Option<&K>, ns: &Namespace) -> Result<()>
where
    K: k8s_openapi::Resource + k8s_openapi::Metadata<Ty = ObjectMeta>,
{
    let Some(child) = child.filter(|c| kubewasm_sdk::is_controlled_by(*c, ns)) else { return Ok(()) };
    let meta = child.metadata();
    let preconditions = client::Preconditions { resource_version: None, uid: meta.uid.clone() };
    let options = client::DeleteOptions { preconditions, propagation_policy: None };
    let name = meta.name.as_deref().unwrap_or_default();
    client::delete_with(&kubewasm_sdk::gvk::<K>(), meta.namespace.as_deref(), name, &options)
}

struct NamespaceDefaults;

impl DesiredState for NamespaceDefaults {
    fn describe() -> Registration {
        Registration::reconciles::<Namespace>().owns::<ResourceQuota>().owns::<NetworkPolicy>()
    }

    fn desired(request: Request) -> Result<Option<Desired>> {
        let settings: Settings = kubewasm_sdk::settings()?;
        let Some(ns) = cache::get::<Namespace>(None, &request.name)? else {
            return Ok(None);
        };
        if ns.metadata.deletion_timestamp.is_some() {
            return Ok(None);
        }
        let name = request.name.as_str();
        let opted_out = ns.metadata.labels.as_ref().is_some_and(|l| l.contains_key(&settings.opt_out_label));
        let existing = cache::get::<ResourceQuota>(Some(name), &settings.quota_name)?;
        if opted_out {
            if settings.desired_state {
                return Ok(Some(Desired::new()));
            }
            delete_controlled(existing.as_ref(), &ns)?;
            let policy = cache::get::<NetworkPolicy>(Some(name), &settings.network_policy_name)?;
            delete_controlled(policy.as_ref(), &ns)?;
            return Ok(None);
        }
        if settings.desired_state {
            let desired = Desired::new().child(&quota(&settings, &ns)).child(&network_policy(&settings, &ns));
            announce(&settings, &ns, existing.is_none())?;
            return Ok(Some(desired));
        }
        client::apply(&quota(&settings, &ns))?;
        client::apply(&network_policy(&settings, &ns))?;
        announce(&settings, &ns, existing.is_none()).map(|()| None)
    }
}

/// A `DefaultsApplied` Event about `ns` the first time (`first`) its defaults are made.
fn announce(settings: &Settings, ns: &Namespace, first: bool) -> Result<()> {
    if !first {
        return Ok(());
    }
    let note =
        format!("applied ResourceQuota {} and NetworkPolicy {}", settings.quota_name, settings.network_policy_name);
    events::normal(&kubewasm_sdk::object_ref(ns), "DefaultsApplied", &note)
}

kubewasm_sdk::export_desired_state!(NamespaceDefaults);
