//! Least-privilege RBAC for one plugin's own identity: the ServiceAccount the host would
//! impersonate for its requests, the rules its effective grants need, and the host's right to
//! impersonate it (`kubewasm rbac`).
//!
//! Resources are named as the API server's discovery names them where a cluster is at hand (the
//! review at load), else by kube's own pluralization (`ApiResource::from_gvk`), so `kubewasm rbac`
//! needs no cluster; there a CRD with an irregular plural needs its rule edited.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::{ApiResource, GroupVersionKind};

use crate::identity::service_account_name;
use crate::informer::Discovery;
use crate::plugin::grants::{Grants, KindRef};

pub mod review;

/// The label naming the plugin an RBAC object is for (not the host's mark of what a plugin made:
/// an operator, not a plugin, writes these).
pub const RBAC_LABEL: &str = "kubewasm.dev/rbac-for";

/// Verbs of a readable kind.
const READ: &[&str] = &["get", "list", "watch"];
/// Verbs of a writable kind (reads included: the authorizer reads the server's copy).
const WRITE: &[&str] = &["get", "list", "watch", "create", "update", "patch", "delete"];
/// Verbs of a status subresource.
const STATUS: &[&str] = &["get", "update", "patch"];
/// Verbs of Events (the host's event sink creates, then patches a series).
const EVENTS: &[&str] = &["create", "patch"];
/// Verbs of the for kind's finalizers: an ownerReference with `blockOwnerDeletion` needs them
/// where the API server enforces owner-reference permissions (OwnerReferencesPermissionEnforcement).
const FINALIZERS: &[&str] = &["update"];
/// Where Events about cluster-scoped objects go (as kube-runtime's Recorder puts them).
const CLUSTER_EVENTS_NAMESPACE: &str = "default";

/// Where the identities live and who impersonates them.
#[derive(Clone, Debug)]
pub struct Identity {
    /// The host's namespace, where the plugin's ServiceAccount is made.
    pub namespace: String,
    /// The host's ServiceAccount, which may impersonate the plugin's.
    pub host_service_account: String,
}

/// The user the host impersonates for `plugin` (`Impersonate-User`).
pub fn user(identity: &Identity, plugin: &str) -> String {
    crate::identity::user(&identity.namespace, plugin)
}

/// How kinds are named as RBAC resources: as discovery found them, else by kube's
/// pluralization.
#[derive(Clone, Debug, Default)]
pub struct ResourceNames(BTreeMap<KindRef, String>);

impl ResourceNames {
    /// Every name guessed by kube's pluralization (no cluster at hand).
    pub fn guessed() -> Self {
        Self::default()
    }

    /// The names the API server serves every kind of `grants` under; a kind discovery cannot
    /// answer for (not served yet, or the server unreachable) keeps the guess.
    pub async fn discovered(discovery: &Discovery, grants: &Grants) -> Self {
        let mut names = BTreeMap::new();
        let for_kind = grants.for_kind().map(KindRef::of);
        let kinds = grants.readable().chain(grants.writable()).chain(grants.writable_controlled());
        for kind in kinds.chain(grants.status_writable()).chain(for_kind.as_ref()) {
            if names.contains_key(kind) {
                continue;
            }
            if let Ok(Some(plural)) = discovery.plural(&kind.group, &kind.kind).await {
                names.insert(kind.clone(), plural);
            }
        }
        Self(names)
    }

    /// `kind`'s resource name.
    pub fn plural(&self, kind: &KindRef) -> String {
        match self.0.get(kind) {
            Some(plural) => plural.clone(),
            None => ApiResource::from_gvk(&GroupVersionKind::gvk(&kind.group, "v1", &kind.kind)).plural,
        }
    }
}

/// The rules `grants` need, one per API group and verb set, resources sorted.
pub fn rules(grants: &Grants, names: &ResourceNames) -> Vec<PolicyRule> {
    rules_where(grants, names, &|_| true, true)
}

/// The rules of the kinds `keep` keeps (and of Events, with `events`).
fn rules_where(
    grants: &Grants,
    names: &ResourceNames,
    keep: &dyn Fn(&KindRef) -> bool,
    events: bool,
) -> Vec<PolicyRule> {
    let mut by_verbs: BTreeMap<(String, &[&str]), Vec<String>> = BTreeMap::new();
    let mut add = |kind: &KindRef, verbs: &'static [&'static str], suffix: &str| {
        if !keep(kind) {
            return;
        }
        let entry = by_verbs.entry((kind.group.clone(), verbs)).or_default();
        let name = format!("{}{suffix}", names.plural(kind));
        if !entry.contains(&name) {
            entry.push(name);
        }
    };
    let writable: Vec<&KindRef> = grants.writable().chain(grants.writable_controlled()).collect();
    for kind in grants.readable().filter(|k| !writable.contains(k)) {
        add(kind, READ, "");
    }
    for kind in &writable {
        add(kind, WRITE, "");
    }
    for kind in grants.status_writable() {
        add(kind, STATUS, "/status");
    }
    if let Some(for_kind) = grants.for_kind() {
        add(&KindRef::of(for_kind), FINALIZERS, "/finalizers");
    }
    if events {
        add(&events_kind(), EVENTS, "");
    }
    by_verbs
        .into_iter()
        .map(|((group, verbs), mut resources)| {
            resources.sort();
            PolicyRule {
                api_groups: Some(vec![group]),
                resources: Some(resources),
                verbs: verbs.iter().map(|v| (*v).to_owned()).collect(),
                ..PolicyRule::default()
            }
        })
        .collect()
}

fn events_kind() -> KindRef {
    KindRef { group: "events.k8s.io".into(), kind: "Event".into() }
}

/// Where the plugin's rules are bound, each with its rules: [`rules`] in every namespace
/// `grants.namespaces` names, plus Events in `default` (where Events about cluster-scoped objects
/// go); or cluster-wide (`None`). A selector over Namespaces cannot be written as RBAC: such a
/// plugin gets cluster-wide rules, and the host's authorizer alone keeps it to its namespaces.
/// The rules of its sensitive kinds (Secrets) are bound only in the namespaces
/// `grants.sensitive.namespaces` names (within its confinement), and nothing is bound in
/// `host_namespace`, the host's own.
pub fn scopes(grants: &Grants, names: &ResourceNames, host_namespace: &str) -> Vec<(Option<String>, Vec<PolicyRule>)> {
    let sensitive: Vec<&KindRef> = grants.sensitive().collect();
    let rules = rules_where(grants, names, &|k| !sensitive.contains(&k), true);
    let confined = grants.namespaces().filter(|s| s.selector.is_none()).map(|s| &s.names);
    let mut scopes = match confined {
        None => vec![(None, rules)],
        Some(names) => confined_scopes(names, rules),
    };
    let sensitive_rules = rules_where(grants, names, &|k| sensitive.contains(&k), false);
    if !sensitive_rules.is_empty() {
        let named = grants.sensitive_namespaces().iter().filter(|ns| confined.is_none_or(|c| c.contains(*ns)));
        for ns in named {
            match scopes.iter_mut().find(|(scope, _)| scope.as_deref() == Some(ns)) {
                Some((_, rules)) => rules.extend(sensitive_rules.iter().cloned()),
                None => scopes.push((Some(ns.clone()), sensitive_rules.clone())),
            }
        }
    }
    scopes.retain(|(ns, _)| ns.as_deref() != Some(host_namespace));
    scopes
}

/// `rules` in each of `names`, and Events in `default` besides.
fn confined_scopes(
    names: &std::collections::BTreeSet<String>,
    rules: Vec<PolicyRule>,
) -> Vec<(Option<String>, Vec<PolicyRule>)> {
    let mut scopes: Vec<_> = names.iter().map(|ns| (Some(ns.clone()), rules.clone())).collect();
    if !names.contains(CLUSTER_EVENTS_NAMESPACE) {
        let events = PolicyRule {
            api_groups: Some(vec![events_kind().group]),
            resources: Some(vec!["events".into()]),
            verbs: EVENTS.iter().map(|v| (*v).to_owned()).collect(),
            ..PolicyRule::default()
        };
        scopes.push((Some(CLUSTER_EVENTS_NAMESPACE.to_owned()), vec![events]));
    }
    scopes
}

/// [`objects`], with `extra` rules in the plugin's roles ([`with_rules`]), as multi-document YAML.
pub fn manifest(
    plugin: &str,
    grants: &Grants,
    identity: &Identity,
    names: &ResourceNames,
    extra: &[PolicyRule],
) -> Result<String, serde_yaml::Error> {
    let objects = with_rules(objects(plugin, grants, identity, names), plugin, extra);
    let docs: Result<Vec<String>, _> = objects.iter().map(serde_yaml::to_string).collect();
    Ok(docs?.join("---\n"))
}

/// The objects: the ServiceAccount, the plugin's rules (a Role and RoleBinding per namespace of
/// [`scopes`], else a ClusterRole and ClusterRoleBinding), and a Role letting the host's
/// ServiceAccount impersonate it.
pub fn objects(plugin: &str, grants: &Grants, identity: &Identity, names: &ResourceNames) -> Vec<serde_json::Value> {
    let sa = service_account_name(plugin);
    let meta = |name: &str, namespace: Option<&str>| ObjectMeta {
        name: Some(name.to_owned()),
        namespace: namespace.map(str::to_owned),
        labels: Some([(RBAC_LABEL.to_owned(), plugin.to_owned())].into()),
        ..ObjectMeta::default()
    };
    let subject = |name: &str| Subject {
        kind: "ServiceAccount".into(),
        name: name.to_owned(),
        namespace: Some(identity.namespace.clone()),
        ..Subject::default()
    };
    let role_ref = |kind: &str, name: &str| RoleRef {
        api_group: Some("rbac.authorization.k8s.io".into()),
        kind: kind.into(),
        name: name.to_owned(),
    };
    let mut docs =
        vec![typed(ServiceAccount { metadata: meta(&sa, Some(&identity.namespace)), ..ServiceAccount::default() })];
    for (namespace, rules) in scopes(grants, names, &identity.namespace) {
        match namespace {
            Some(ns) => {
                docs.push(typed(Role { metadata: meta(&sa, Some(&ns)), rules: Some(rules) }));
                docs.push(typed(RoleBinding {
                    metadata: meta(&sa, Some(&ns)),
                    role_ref: role_ref("Role", &sa),
                    subjects: Some(vec![subject(&sa)]),
                }));
            }
            None => {
                docs.push(typed(ClusterRole {
                    metadata: meta(&sa, None),
                    rules: Some(rules),
                    ..ClusterRole::default()
                }));
                docs.push(typed(ClusterRoleBinding {
                    metadata: meta(&sa, None),
                    role_ref: role_ref("ClusterRole", &sa),
                    subjects: Some(vec![subject(&sa)]),
                }));
            }
        }
    }
    let impersonate = format!("{sa}-impersonate");
    docs.push(typed(Role {
        metadata: meta(&impersonate, Some(&identity.namespace)),
        rules: Some(vec![PolicyRule {
            api_groups: Some(vec![String::new()]),
            resources: Some(vec!["serviceaccounts".into()]),
            resource_names: Some(vec![sa.clone()]),
            verbs: vec!["impersonate".into()],
            ..PolicyRule::default()
        }]),
    }));
    docs.push(typed(RoleBinding {
        metadata: meta(&impersonate, Some(&identity.namespace)),
        role_ref: role_ref("Role", &impersonate),
        subjects: Some(vec![subject(&identity.host_service_account)]),
    }));
    docs
}

/// What writing some of `grants`' kinds needs that no rule derived from grants can give, one
/// sentence each: a binding needs `bind` on the role it names, and a role `escalate`, unless the
/// identity already holds every right they grant (RBAC's escalation check); which roles, the
/// grants do not say. `kubewasm rbac --rules` takes them from the operator.
pub fn underivable(grants: &Grants) -> Vec<String> {
    let written: Vec<&KindRef> = grants.writable().chain(grants.writable_controlled()).collect();
    let rbac = |kind: &str| written.iter().any(|k| k.group == "rbac.authorization.k8s.io" && k.kind == kind);
    let mut notes = Vec::new();
    for binding in ["RoleBinding", "ClusterRoleBinding"].into_iter().filter(|k| rbac(k)) {
        notes.push(format!(
            "writing {binding}s needs `bind` on each role they name (or every right that role grants): \
             give it in a rules file, e.g. {{apiGroups: [rbac.authorization.k8s.io], resources: [clusterroles], \
             verbs: [bind], resourceNames: [view]}}"
        ));
    }
    for role in ["Role", "ClusterRole"].into_iter().filter(|k| rbac(k)) {
        notes.push(format!(
            "writing {role}s needs `escalate` on them (or every right they grant): give it in a rules file"
        ));
    }
    notes
}

/// `docs` ([`objects`]) with `extra` rules added to the plugin's own roles: the ClusterRole, or
/// each Role holding its rules (not the host's impersonation role).
pub fn with_rules(mut docs: Vec<serde_json::Value>, plugin: &str, extra: &[PolicyRule]) -> Vec<serde_json::Value> {
    let sa = service_account_name(plugin);
    for doc in docs.iter_mut().filter(|d| matches!(d["kind"].as_str(), Some("Role" | "ClusterRole"))) {
        if doc["metadata"]["name"] == sa.as_str()
            && let Some(rules) = doc["rules"].as_array_mut()
        {
            rules.extend(extra.iter().map(|r| serde_json::to_value(r).expect("a rule serializes")));
        }
    }
    docs
}

/// The object as JSON with its `apiVersion` and `kind`.
fn typed<K: k8s_openapi::Resource + serde::Serialize>(object: K) -> serde_json::Value {
    let mut value = serde_json::to_value(&object).expect("a Kubernetes object serializes");
    value["apiVersion"] = K::API_VERSION.into();
    value["kind"] = K::KIND.into();
    value
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugin::grants::GrantConfig;
    use crate::plugin::registration::Registration;

    fn grants(config: &str) -> Grants {
        let registration = Registration {
            owns: vec![
                GroupVersionKind::gvk("", "v1", "ConfigMap"),
                GroupVersionKind::gvk("networking.k8s.io", "v1", "NetworkPolicy"),
            ],
            writes: vec![GroupVersionKind::gvk("apps", "v1", "Deployment")],
            ..Registration::new(GroupVersionKind::gvk("", "v1", "Namespace"))
        };
        // What the registration asks for, approved; `config` adds to it.
        let approved = "read: [Namespace, ConfigMap, NetworkPolicy.networking.k8s.io]\nstatus: [Namespace]\n\
                        own: [ConfigMap, NetworkPolicy.networking.k8s.io]\n";
        Grants::resolve(&registration, &serde_yaml::from_str::<GrantConfig>(&format!("{approved}{config}")).unwrap())
            .unwrap()
    }

    fn identity() -> Identity {
        Identity { namespace: "kubewasm-system".into(), host_service_account: "kubewasm".into() }
    }

    fn rule<'a>(rules: &'a [PolicyRule], group: &str, verb: &str) -> &'a PolicyRule {
        rules
            .iter()
            .find(|r| r.api_groups.as_deref() == Some(&[group.to_owned()]) && r.verbs.iter().any(|v| v == verb))
            .unwrap_or_else(|| panic!("no {verb} rule for group {group:?} in {rules:?}"))
    }

    #[test]
    fn the_rules_grant_reads_writes_status_and_events_and_nothing_more() {
        let rules = rules(&grants("write: [Deployment.apps]"), &ResourceNames::guessed());
        let owned = rule(&rules, "", "delete");
        assert_eq!(owned.resources, Some(vec!["configmaps".to_owned()]));
        assert!(owned.verbs.iter().any(|v| v == "get"), "the server's copy of a written kind is read: {owned:?}");
        let read_only = rules.iter().find(|r| r.verbs == READ).unwrap();
        assert_eq!(read_only.resources, Some(vec!["namespaces".to_owned()]), "the for kind is read only");
        assert_eq!(rule(&rules, "", "update").resources.as_ref().unwrap().len(), 1);
        let status = rules.iter().find(|r| r.verbs == STATUS).unwrap();
        assert_eq!(status.resources, Some(vec!["namespaces/status".to_owned()]));
        assert_eq!(rule(&rules, "apps", "patch").resources, Some(vec!["deployments".to_owned()]));
        assert_eq!(rule(&rules, "networking.k8s.io", "create").resources, Some(vec!["networkpolicies".to_owned()]));
        assert_eq!(rule(&rules, "events.k8s.io", "create").resources, Some(vec!["events".to_owned()]));
        let finalizers = rules.iter().find(|r| r.verbs == FINALIZERS).unwrap();
        assert_eq!(finalizers.resources, Some(vec!["namespaces/finalizers".to_owned()]), "blockOwnerDeletion");
        assert!(rules.iter().all(|r| r.resources.as_ref().unwrap().iter().all(|res| res != "secrets")));
    }

    #[test]
    fn a_plugin_confined_to_named_namespaces_gets_roles_there_and_the_host_may_impersonate_it() {
        let yaml = manifest(
            "defaults",
            &grants("write: [Deployment.apps]\nnamespaces: {names: [a, b]}"),
            &identity(),
            &ResourceNames::guessed(),
            &[],
        )
        .unwrap();
        let docs: Vec<serde_json::Value> =
            serde_yaml::Deserializer::from_str(&yaml).map(|d| serde::Deserialize::deserialize(d).unwrap()).collect();
        let kinds: Vec<(&str, &str)> = docs
            .iter()
            .map(|d| (d["kind"].as_str().unwrap(), d["metadata"]["namespace"].as_str().unwrap_or("")))
            .collect();
        assert_eq!(
            kinds,
            [
                ("ServiceAccount", "kubewasm-system"),
                ("Role", "a"),
                ("RoleBinding", "a"),
                ("Role", "b"),
                ("RoleBinding", "b"),
                ("Role", "default"),
                ("RoleBinding", "default"),
                ("Role", "kubewasm-system"),
                ("RoleBinding", "kubewasm-system"),
            ]
        );
        assert_eq!(docs[0]["metadata"]["name"], "kubewasm-plugin-defaults");
        assert_eq!(docs[2]["subjects"][0]["name"], "kubewasm-plugin-defaults");
        assert_eq!(
            docs[5]["rules"],
            serde_json::json!([{"apiGroups": ["events.k8s.io"], "resources": ["events"],
            "verbs": ["create", "patch"]}]),
            "only Events in default, where those about cluster-scoped objects go"
        );
        assert_eq!(docs[7]["rules"][0]["verbs"][0], "impersonate");
        assert_eq!(docs[7]["rules"][0]["resourceNames"][0], "kubewasm-plugin-defaults");
        assert_eq!(docs[8]["subjects"][0]["name"], "kubewasm", "the host's ServiceAccount impersonates");
        assert_eq!(user(&identity(), "defaults"), "system:serviceaccount:kubewasm-system:kubewasm-plugin-defaults");
    }

    #[test]
    fn a_dangerous_kind_gets_rules_only_once_its_operator_approved_it_as_dangerous() {
        let registration = Registration {
            owns: vec![GroupVersionKind::gvk("admissionregistration.k8s.io", "v1", "ValidatingWebhookConfiguration")],
            ..Registration::new(GroupVersionKind::gvk("", "v1", "ConfigMap"))
        };
        let kind = "ValidatingWebhookConfiguration.admissionregistration.k8s.io";
        let rules_under = |config: &str| {
            let config = format!("read: [ConfigMap, {kind}]\nstatus: [ConfigMap]\n{config}");
            let config = serde_yaml::from_str::<GrantConfig>(&config).unwrap();
            Grants::resolve(&registration, &config).map(|grants| rules(&grants, &ResourceNames::guessed()))
        };
        for config in [String::new(), format!("own: [{kind}]")] {
            let refused = rules_under(&config).expect_err("no rules, the plugin is refused");
            assert!(refused.dangerous.contains(&kind.parse().unwrap()), "{config}: {refused}");
        }
        let approved = rules_under(&format!("own: [{kind}]\ndangerous: [{kind}]")).unwrap();
        let webhooks = rule(&approved, "admissionregistration.k8s.io", "create");
        assert_eq!(webhooks.resources, Some(vec!["validatingwebhookconfigurations".to_owned()]));
    }

    #[test]
    fn secret_rules_are_bound_only_in_the_namespaces_named_for_them_and_nothing_in_the_hosts() {
        let registration = Registration {
            reads: vec![GroupVersionKind::gvk("", "v1", "Secret")],
            ..Registration::new(GroupVersionKind::gvk("", "v1", "ConfigMap"))
        };
        let config = "{read: [ConfigMap, Secret], status: [ConfigMap], \
                      sensitive: {namespaces: [vault, kubewasm-system]}}";
        let grants = Grants::resolve(&registration, &serde_yaml::from_str::<GrantConfig>(config).unwrap()).unwrap();
        let scopes = scopes(&grants, &ResourceNames::guessed(), "kubewasm-system");
        let secrets_in = |scope: Option<&str>| {
            scopes
                .iter()
                .filter(|(ns, _)| ns.as_deref() == scope)
                .flat_map(|(_, rules)| rules)
                .any(|r| r.resources.as_ref().unwrap().iter().any(|res| res == "secrets"))
        };
        assert_eq!(scopes.iter().map(|(ns, _)| ns.as_deref()).collect::<Vec<_>>(), [None, Some("vault")]);
        assert!(!secrets_in(None), "no cluster-wide Secret rule: {scopes:?}");
        assert!(secrets_in(Some("vault")));
        let cluster = &scopes[0].1;
        assert!(cluster.iter().any(|r| r.resources.as_ref().unwrap().contains(&"configmaps".to_owned())));
    }

    #[test]
    fn binding_roles_is_said_to_need_rules_the_grants_cannot_give_and_extra_rules_join_the_plugins_role() {
        let binding = "RoleBinding.rbac.authorization.k8s.io";
        let registration = Registration {
            writes: vec![GroupVersionKind::gvk("rbac.authorization.k8s.io", "v1", "RoleBinding")],
            ..Registration::new(GroupVersionKind::gvk("", "v1", "Namespace"))
        };
        let config = format!("{{read: [Namespace], status: [Namespace], write: [{binding}], dangerous: [{binding}]}}");
        let grants = Grants::resolve(&registration, &serde_yaml::from_str::<GrantConfig>(&config).unwrap()).unwrap();
        let notes = underivable(&grants);
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(notes[0].contains("writing RoleBindings needs `bind`"), "{notes:?}");
        assert!(
            underivable(&self::grants("write: [Deployment.apps]")).is_empty(),
            "nothing to say of a plugin writing no RBAC"
        );

        let bind: PolicyRule = serde_yaml::from_str(
            "{apiGroups: [rbac.authorization.k8s.io], resources: [clusterroles], verbs: [bind], resourceNames: [view]}",
        )
        .unwrap();
        let yaml = manifest("nsaas", &grants, &identity(), &ResourceNames::guessed(), &[bind]).unwrap();
        let docs: Vec<serde_json::Value> =
            serde_yaml::Deserializer::from_str(&yaml).map(|d| serde::Deserialize::deserialize(d).unwrap()).collect();
        let role = docs.iter().find(|d| d["kind"] == "ClusterRole").unwrap();
        let last = role["rules"].as_array().unwrap().last().unwrap();
        assert_eq!(last["verbs"], serde_json::json!(["bind"]), "{role}");
        let impersonate = docs.iter().find(|d| d["kind"] == "Role").unwrap();
        assert_eq!(impersonate["rules"].as_array().unwrap().len(), 1, "the host's impersonation role is left alone");
    }

    #[test]
    fn an_unconfined_plugin_gets_a_cluster_role() {
        let yaml =
            manifest("defaults", &grants("write: [Deployment.apps]"), &identity(), &ResourceNames::guessed(), &[])
                .unwrap();
        assert!(yaml.contains("kind: ClusterRole\n") && yaml.contains("kind: ClusterRoleBinding\n"), "{yaml}");
    }
}
