//! Whether a plugin's identity holds what its grants need, asked of the API server as the
//! plugin (SelfSubjectAccessReview, which every authenticated user may create), and, for
//! development and tests, making that RBAC with the host's own rights.

use futures::{StreamExt as _, TryStreamExt as _, stream};
use k8s_openapi::api::authorization::v1::{ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec};
use k8s_openapi::api::rbac::v1::PolicyRule;
use kube::Client;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::Value;

use super::{Identity, ResourceNames};
use crate::identity::{self, Identities};
use crate::informer::Discovery;
use crate::plugin::grants::{Grants, KindRef};

/// Reviews sent at once.
const IN_FLIGHT: usize = 8;

/// The field manager of RBAC the host makes itself.
const MANAGER: &str = "kubewasm-rbac";

/// One permission a review asks about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Permission {
    /// API group (`""` for core).
    pub group: String,
    /// Resource, with `/subresource` if any.
    pub resource: String,
    /// Verb.
    pub verb: String,
    /// Namespace; `None` for cluster-wide.
    pub namespace: Option<String>,
}

impl std::fmt::Display for Permission {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let group = if self.group.is_empty() { String::new() } else { format!(".{}", self.group) };
        write!(f, "{} {}{group}", self.verb, self.resource)?;
        match &self.namespace {
            Some(ns) => write!(f, " in {ns}"),
            None => write!(f, " cluster-wide"),
        }
    }
}

/// Every permission `grants` need, in each of its [`super::scopes`] (none in `host_namespace`).
pub fn wanted(grants: &Grants, names: &ResourceNames, host_namespace: &str) -> Vec<Permission> {
    super::scopes(grants, names, host_namespace)
        .iter()
        .flat_map(|(namespace, rules)| permissions(rules, namespace.as_deref()))
        .collect()
}

/// Every permission `rules` grant in `namespace` (cluster-wide for `None`).
pub fn permissions(rules: &[PolicyRule], namespace: Option<&str>) -> Vec<Permission> {
    let mut all = Vec::new();
    for rule in rules {
        for group in rule.api_groups.iter().flatten() {
            for resource in rule.resources.iter().flatten() {
                for verb in &rule.verbs {
                    all.push(Permission {
                        group: group.clone(),
                        resource: resource.clone(),
                        verb: verb.clone(),
                        namespace: namespace.map(str::to_owned),
                    });
                }
            }
        }
    }
    all
}

/// The permissions of `wanted` that `as_plugin` (a client sending as the plugin) lacks.
pub async fn missing(as_plugin: &Client, wanted: &[Permission]) -> Result<Vec<Permission>, kube::Error> {
    let api = Api::<SelfSubjectAccessReview>::all(as_plugin.clone());
    let reviews: Vec<SelfSubjectAccessReview> = wanted.iter().map(review).collect();
    let allowed: Vec<bool> = stream::iter(reviews)
        .map(move |review| {
            let api = api.clone();
            async move {
                let answer = api.create(&PostParams::default(), &review).await?;
                Ok::<_, kube::Error>(answer.status.is_some_and(|s| s.allowed))
            }
        })
        .buffered(IN_FLIGHT)
        .try_collect()
        .await?;
    Ok(wanted.iter().zip(allowed).filter(|(_, ok)| !ok).map(|(p, _)| p.clone()).collect())
}

/// The review asking whether the sender may do `p`.
fn review(p: &Permission) -> SelfSubjectAccessReview {
    let (resource, subresource) = match p.resource.split_once('/') {
        Some((resource, sub)) => (resource.to_owned(), Some(sub.to_owned())),
        None => (p.resource.clone(), None),
    };
    SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                group: Some(p.group.clone()),
                resource: Some(resource),
                subresource,
                verb: Some(p.verb.clone()),
                namespace: p.namespace.clone(),
                ..ResourceAttributes::default()
            }),
            ..SelfSubjectAccessReviewSpec::default()
        },
        ..SelfSubjectAccessReview::default()
    }
}

/// Applies `objects` (what [`super::objects`] makes) with `client`, after the namespace
/// `namespace` their ServiceAccount lives in. For `kubewasm dev` and tests, whose host runs with
/// a cluster admin's credentials; a deployed host is never given the rights this needs.
///
/// Roles and bindings get a suffix from the rules they hold, so two hosts provisioning one
/// plugin name with different grants (tests in parallel) add to its rights instead of taking
/// turns narrowing them; nothing is ever removed. Every object is tried; the errors are joined.
pub async fn provision_objects(client: &Client, namespace: &str, objects: &[Value]) -> Result<(), String> {
    let params = PatchParams::apply(MANAGER).force();
    let ns = serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}});
    let namespaces = Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone());
    let mut errors = Vec::new();
    if let Err(e) = namespaces.patch(namespace, &params, &Patch::Apply(&ns)).await {
        errors.push(format!("Namespace {namespace}: {e}"));
    }
    let suffix = crate::plugin::sha256_hex(&serde_json::to_vec(objects).unwrap_or_default());
    for object in objects {
        let object = suffixed(object, &suffix[..8]);
        let (group, version) = match object["apiVersion"].as_str().unwrap_or_default().split_once('/') {
            Some((group, version)) => (group, version),
            None => ("", object["apiVersion"].as_str().unwrap_or_default()),
        };
        let kind = object["kind"].as_str().unwrap_or_default();
        let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind));
        let name = object["metadata"]["name"].as_str().unwrap_or_default();
        let api: Api<DynamicObject> = match object["metadata"]["namespace"].as_str() {
            Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
            None => Api::all_with(client.clone(), &resource),
        };
        if let Err(e) = api.patch(name, &params, &Patch::Apply(&object)).await {
            errors.push(format!("{kind} {name}: {e}"));
        }
    }
    if errors.is_empty() { Ok(()) } else { Err(errors.join("; ")) }
}

/// `object` with `-<suffix>` after its name if it is a role or binding (and after the role a
/// binding names).
fn suffixed(object: &Value, suffix: &str) -> Value {
    let mut object = object.clone();
    let kind = object["kind"].as_str().unwrap_or_default().to_owned();
    if matches!(kind.as_str(), "Role" | "ClusterRole" | "RoleBinding" | "ClusterRoleBinding") {
        let name = format!("{}-{suffix}", object["metadata"]["name"].as_str().unwrap_or_default());
        object["metadata"]["name"] = name.into();
        if let Some(role) = object["roleRef"]["name"].as_str() {
            object["roleRef"]["name"] = format!("{role}-{suffix}").into();
        }
    }
    object
}

/// Reviews of a freshly provisioned identity before its answers are taken as they are: the API
/// server's RBAC authorizer sees new bindings through its informers, a moment later.
const PROVISIONED_REVIEWS: usize = 50;

/// How long one review may take in all (a slow API server must not hold a plugin's load).
const REVIEW_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// What a review found: each lacking permission (or why the review could not be made), and the
/// readable kinds among them, which the host then withholds from the plugin.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Review {
    /// One entry per permission lacking, or why the review could not be made.
    pub missing: Vec<String>,
    /// Kinds of the grants' reads whose `get`, `list` or `watch` the identity lacks somewhere.
    pub unreadable: std::collections::BTreeSet<KindRef>,
}

impl Review {
    fn failed(why: String) -> Self {
        Self { missing: vec![why], ..Self::default() }
    }
}

/// What plugin `plugin` lacks at the API server for `grants`, as its ServiceAccount in
/// `identity.namespace` (each entry a permission, or why the review could not be made). With
/// `provision`, its RBAC is first made with `host`'s own rights, and reviewed again until the API
/// server's authorizer has caught up (at most `PROVISIONED_REVIEWS` times). Bounded by
/// `REVIEW_TIMEOUT`.
///
/// Resources are named as `discovery` finds them, which asks with the host's client.
pub async fn check(
    discovery: &Discovery,
    identity: &Identity,
    provision: bool,
    plugin: &str,
    grants: &Grants,
) -> Review {
    let review = reviewed(discovery, identity, provision, plugin, grants);
    match tokio::time::timeout(REVIEW_TIMEOUT, review).await {
        Ok(review) => review,
        Err(_) => Review::failed(format!(
            "the review of {} took longer than {REVIEW_TIMEOUT:?}",
            identity::user(&identity.namespace, plugin)
        )),
    }
}

/// The kinds of `grants`' reads that `lacking` says may not be read somewhere.
fn unreadable(grants: &Grants, names: &ResourceNames, lacking: &[Permission]) -> std::collections::BTreeSet<KindRef> {
    let reads = |kind: &KindRef| {
        let plural = names.plural(kind);
        lacking.iter().any(|p| {
            p.group == kind.group && p.resource == plural && matches!(p.verb.as_str(), "get" | "list" | "watch")
        })
    };
    grants.readable().filter(|k| reads(k)).cloned().collect()
}

async fn reviewed(
    discovery: &Discovery,
    identity: &Identity,
    provision: bool,
    plugin: &str,
    grants: &Grants,
) -> Review {
    let host = discovery.client();
    let as_plugin = Identities::host(host.clone()).impersonating(&identity.namespace).client(plugin);
    let names = ResourceNames::discovered(discovery, grants).await;
    let wanted = wanted(grants, &names, &identity.namespace);
    if provision
        && let Err(e) =
            provision_objects(host, &identity.namespace, &super::objects(plugin, grants, identity, &names)).await
    {
        return Review::failed(format!("could not make the plugin's RBAC: {e}"));
    }
    let mut reviews = 0;
    loop {
        reviews += 1;
        match missing(&as_plugin, &wanted).await {
            Ok(lacking) if lacking.is_empty() || !provision || reviews >= PROVISIONED_REVIEWS => {
                let unreadable = unreadable(grants, &names, &lacking);
                return Review { missing: lacking.iter().map(ToString::to_string).collect(), unreadable };
            }
            Ok(_) => tokio::time::sleep(std::time::Duration::from_millis(100)).await,
            Err(e) => {
                let user = identity::user(&identity.namespace, plugin);
                return Review::failed(format!("cannot review the plugin's rights as {user}: {e}"));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rule_becomes_one_permission_per_resource_verb_and_namespace() {
        let rule = PolicyRule {
            api_groups: Some(vec![String::new()]),
            resources: Some(vec!["configmaps".into(), "namespaces/status".into()]),
            verbs: vec!["get".into(), "patch".into()],
            ..PolicyRule::default()
        };
        let all = permissions(std::slice::from_ref(&rule), Some("a"));
        assert_eq!(all.len(), 4);
        assert_eq!(all[0].to_string(), "get configmaps in a");
        assert_eq!(permissions(&[rule], None)[3].to_string(), "patch namespaces/status cluster-wide");
    }

    #[test]
    fn provisioned_roles_and_bindings_are_named_for_their_rules_and_service_accounts_are_not() {
        let role = serde_json::json!({"kind": "RoleBinding", "metadata": {"name": "p"}, "roleRef": {"name": "p"}});
        let named = suffixed(&role, "abc");
        assert_eq!(
            (named["metadata"]["name"].as_str(), named["roleRef"]["name"].as_str()),
            (Some("p-abc"), Some("p-abc"))
        );
        let account = serde_json::json!({"kind": "ServiceAccount", "metadata": {"name": "p"}});
        assert_eq!(suffixed(&account, "abc"), account);
    }
}
