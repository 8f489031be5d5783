//! deploy/base/plugin-dangerous-kinds-policy.yaml against a real kube-apiserver: a plugin identity
//! that RBAC allows everything is refused the kinds that control the cluster (issue 49, class 3)
//! but admission policies themselves, which kube-apiserver runs no policy on; a person is not
//! refused; a plugin its operator exempted is refused only what it was not exempted for; and the
//! policy matches every kind the host calls dangerous.

use crate::common;

use std::time::Duration;

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Service, ServiceAccount};
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use kubewasm_host::identity::Identities;
use kubewasm_host::plugin::grants::{DANGEROUS, DANGEROUS_STATUS};
use kubewasm_testenv::ControlPlane;
use serde_json::{Value, json};

use common::examples::deploy_dir;
use common::{eventually, run_ok};

const POLICY: &str = "base/plugin-dangerous-kinds-policy.yaml";

/// What the exempted plugin may write, patched in as the policy's comment tells an operator to.
const EXEMPTIONS: &str = "{'exempt': ['validatingwebhookconfigurations.admissionregistration.k8s.io', \
     'validatingadmissionpolicies.admissionregistration.k8s.io', \
     'clusterrolebindings.rbac.authorization.k8s.io', 'customresourcedefinitions.apiextensions.k8s.io']}";

/// An admission policy named after `who`, harmless: it allows everything and is bound nowhere.
/// kube-apiserver runs no admission policy on admission policies (so that none can lock itself
/// in), so this one shows the limit of the shipped policy: here RBAC alone refuses a plugin.
fn admission_policy(who: &str) -> (GroupVersionKind, &'static str, Value) {
    (
        GroupVersionKind::gvk("admissionregistration.k8s.io", "v1", "ValidatingAdmissionPolicy"),
        "validatingadmissionpolicies.admissionregistration.k8s.io",
        json!({"metadata": {"name": format!("{who}-policy")}, "spec": {
            "matchConstraints": {"resourceRules": [{"apiGroups": ["coordination.k8s.io"], "apiVersions": ["v1"],
                "operations": ["UPDATE"], "resources": ["leases"]}]},
            "validations": [{"expression": "true"}]}}),
    )
}

/// The other admission-policy kinds beyond the shipped policy's reach, as [`admission_policy`]:
/// a binding in audit mode and a mutating policy that sets nothing, both for `who`'s policy.
fn other_admission_policies(who: &str) -> Vec<(GroupVersionKind, Value)> {
    let admission = |kind| GroupVersionKind::gvk("admissionregistration.k8s.io", "v1", kind);
    vec![
        (
            admission("ValidatingAdmissionPolicyBinding"),
            json!({"metadata": {"name": format!("{who}-binding")},
                "spec": {"policyName": format!("{who}-policy"), "validationActions": ["Audit"]}}),
        ),
        (
            admission("MutatingAdmissionPolicy"),
            json!({"metadata": {"name": format!("{who}-mutating")}, "spec": {"reinvocationPolicy": "Never",
                "matchConstraints": {"resourceRules": [{"apiGroups": ["coordination.k8s.io"], "apiVersions": ["v1"],
                    "operations": ["UPDATE"], "resources": ["leases"]}]},
                "mutations": [{"patchType": "ApplyConfiguration", "applyConfiguration": {"expression": "Object{}"}}]}}),
        ),
    ]
}

/// Three dangerous kinds, each with an object of it named after `who` (harmless: no webhook, a
/// binding for a ServiceAccount that does not exist, a CRD of a test group): (kind, resource as
/// the policy names it, object).
fn dangerous_objects(who: &str) -> Vec<(GroupVersionKind, &'static str, Value)> {
    vec![
        (
            GroupVersionKind::gvk("admissionregistration.k8s.io", "v1", "ValidatingWebhookConfiguration"),
            "validatingwebhookconfigurations.admissionregistration.k8s.io",
            json!({"metadata": {"name": format!("{who}-webhook")}, "webhooks": []}),
        ),
        (
            GroupVersionKind::gvk("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding"),
            "clusterrolebindings.rbac.authorization.k8s.io",
            json!({"metadata": {"name": format!("{who}-binding")},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
                "subjects": [{"kind": "ServiceAccount", "name": "nobody", "namespace": "default"}]}),
        ),
        (
            GroupVersionKind::gvk("apiextensions.k8s.io", "v1", "CustomResourceDefinition"),
            "customresourcedefinitions.apiextensions.k8s.io",
            json!({"metadata": {"name": format!("things{who}.dangerous.test")}, "spec": {
                "group": "dangerous.test", "scope": "Cluster",
                "names": {"kind": format!("Thing{who}"), "plural": format!("things{who}")},
                "versions": [{"name": "v1", "served": true, "storage": true,
                    "schema": {"openAPIV3Schema": {"type": "object"}}}]}}),
        ),
    ]
}

/// Creates `object` of `kind` as `client`, for real or as a dry run; the refusal's text, if any.
async fn create(client: &kube::Client, kind: &GroupVersionKind, object: &Value, dry_run: bool) -> Option<String> {
    let api = Api::<DynamicObject>::all_with(client.clone(), &ApiResource::from_gvk(kind));
    let object: DynamicObject = serde_json::from_value(object.clone()).unwrap();
    let params = PostParams { dry_run, ..PostParams::default() };
    api.create(&params, &object).await.err().map(|e| e.to_string())
}

/// The policy on its own control plane (it binds every plugin identity of `kubewasm-system`,
/// which the shared one's tests use), with two plugin identities bound to cluster-admin: only
/// admission stands between them and the cluster. It cannot stand before admission policies
/// (see [`admission_policy`]): there RBAC, which `kubewasm rbac` derives from approved grants
/// only, is the API server's one layer.
#[tokio::test]
async fn a_plugin_bound_to_cluster_admin_is_refused_dangerous_kinds_unless_exempted_but_not_admission_policies() {
    let cp = ControlPlane::builder().start().expect("a control plane (needs `make control-plane`)");
    let admin = cp.admin_client().await;
    let mut apply = cp.kubectl();
    apply.args(["apply", "--server-side", "-f"]).arg(deploy_dir().join(POLICY));
    run_ok(apply);
    let mut exempt = cp.kubectl();
    let patch = json!([{"op": "replace", "path": "/spec/variables/0/expression", "value": EXEMPTIONS}]);
    exempt.args(["patch", "validatingadmissionpolicy", "kubewasm-plugin-dangerous-kinds", "--type", "json", "-p"]);
    exempt.arg(patch.to_string());
    run_ok(exempt);
    for plugin in ["hostile", "exempt"] {
        common::hostile::bind_cluster_admin(&admin, plugin).await;
    }
    let identities = Identities::host(admin.clone()).impersonating("kubewasm-system");
    let (hostile, exempted) = (identities.client("hostile"), identities.client("exempt"));

    // The policy takes effect once the API server has compiled it (a dry run is admitted as a
    // write is, and leaves nothing behind); the exemption once it has compiled the patch.
    let probe = dangerous_objects("probe");
    let (webhook, _, object) = &probe[0];
    eventually("the policy refuses the hostile plugin", Duration::from_secs(30), || async {
        create(&hostile, webhook, object, true).await.filter(|refused| refused.contains("a dangerous kind"))
    })
    .await;
    eventually("the policy lets the exempted plugin through", Duration::from_secs(30), || async {
        create(&exempted, webhook, object, true).await.is_none().then_some(())
    })
    .await;

    for (kind, resource, object) in dangerous_objects("hostile") {
        let refused = create(&hostile, &kind, &object, false).await.unwrap_or_else(|| panic!("{resource} made"));
        let message = format!("plugin hostile may not CREATE {resource}: a dangerous kind (it controls the cluster)");
        assert!(refused.contains(&message), "{resource}: {refused}");
    }
    let (policy, _, object) = admission_policy("hostile");
    let unguarded = "kube-apiserver now runs admission policies on admission policies: say so in \
                     plugin-dangerous-kinds-policy.yaml and README's Security model, and expect a refusal here";
    assert_eq!(create(&hostile, &policy, &object, false).await, None, "{unguarded}");
    for (kind, object) in other_admission_policies("hostile") {
        assert_eq!(create(&hostile, &kind, &object, false).await, None, "{}: {unguarded}", kind.kind);
    }
    for (kind, resource, object) in dangerous_objects("people").into_iter().chain([admission_policy("people")]) {
        assert_eq!(create(&admin, &kind, &object, false).await, None, "a person makes a {resource}");
    }
    for (kind, resource, object) in dangerous_objects("exempt") {
        assert_eq!(create(&exempted, &kind, &object, false).await, None, "the exempted plugin makes a {resource}");
    }
    let role = GroupVersionKind::gvk("rbac.authorization.k8s.io", "v1", "ClusterRole");
    let role_object = json!({"metadata": {"name": "exempt-role"}, "rules": []});
    let refused = create(&exempted, &role, &role_object, false).await.expect("a ClusterRole it was not exempted for");
    assert!(refused.contains("plugin exempt may not CREATE clusterroles.rbac.authorization.k8s.io"), "{refused}");

    // A subresource: a token for a ServiceAccount (TokenRequest) acts as that ServiceAccount.
    let accounts = Api::<ServiceAccount>::namespaced(admin.clone(), "default");
    let victim = serde_json::from_value(json!({"metadata": {"name": "victim"}})).unwrap();
    accounts.create(&PostParams::default(), &victim).await.unwrap();
    let request = TokenRequest { spec: Some(TokenRequestSpec::default()), ..TokenRequest::default() };
    let as_hostile = Api::<ServiceAccount>::namespaced(hostile.clone(), "default");
    let token = as_hostile.create_token_request("victim", &PostParams::default(), &request).await;
    let refused = token.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(refused.contains("plugin hostile may not CREATE serviceaccounts (token)"), "{refused}");

    // A Service it may make, but not the load balancer address in its status (CVE-2020-8554);
    // nor Endpoints, which send the Service's traffic anywhere.
    let services = Api::<Service>::namespaced(hostile.clone(), "default");
    let service =
        json!({"metadata": {"name": "hostile-svc"}, "spec": {"type": "LoadBalancer", "ports": [{"port": 80}]}});
    services.create(&PostParams::default(), &serde_json::from_value(service).unwrap()).await.unwrap();
    let ingress = json!({"status": {"loadBalancer": {"ingress": [{"ip": "10.0.0.53"}]}}});
    let status = services.patch_status("hostile-svc", &PatchParams::default(), &Patch::Merge(&ingress)).await;
    let refused = status.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(refused.contains("plugin hostile may not UPDATE services (status)"), "{refused}");
    let endpoints = json!({"metadata": {"name": "hostile-svc"}, "subsets": [{"addresses": [{"ip": "10.0.0.53"}]}]});
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk("", "v1", "Endpoints"));
    let endpoints_api = Api::<DynamicObject>::namespaced_with(hostile.clone(), "default", &resource);
    let made = endpoints_api.create(&PostParams::default(), &serde_json::from_value(endpoints).unwrap()).await;
    let refused = made.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(refused.contains("plugin hostile may not CREATE endpoints"), "{refused}");

    // Held-out round of issue 49, the API server alone: a Lease (the control plane's leaders, a
    // node's heartbeat) and a Binding (anyone's pending Pod onto a node of its choosing).
    let refusal = |gvk: GroupVersionKind, body: Value| {
        let api = Api::<DynamicObject>::namespaced_with(hostile.clone(), "default", &ApiResource::from_gvk(&gvk));
        async move {
            let made = api.create(&PostParams::default(), &serde_json::from_value(body).unwrap()).await;
            made.err().map(|e| e.to_string()).unwrap_or_default()
        }
    };
    let lease = json!({"metadata": {"name": "hostile-lease"}, "spec": {"holderIdentity": "hostile"}});
    let refused = refusal(GroupVersionKind::gvk("coordination.k8s.io", "v1", "Lease"), lease).await;
    assert!(refused.contains("plugin hostile may not CREATE leases.coordination.k8s.io"), "{refused}");
    let binding = json!({"metadata": {"name": "pending"}, "target": {"kind": "Node", "name": "anywhere"}});
    let refused = refusal(GroupVersionKind::gvk("", "v1", "Binding"), binding).await;
    assert!(refused.contains("plugin hostile may not CREATE bindings"), "{refused}");
}

#[test]
fn the_policy_matches_every_dangerous_kind_and_its_subresources() {
    let text = std::fs::read_to_string(deploy_dir().join(POLICY)).unwrap();
    let policy: Value = serde_yaml::Deserializer::from_str(&text)
        .map(|doc| <Value as serde::Deserialize>::deserialize(doc).unwrap())
        .find(|doc: &Value| doc["kind"] == "ValidatingAdmissionPolicy")
        .unwrap();
    let rules = policy["spec"]["matchConstraints"]["resourceRules"].as_array().unwrap();
    let matched = |group: &str, resource: &str| {
        rules.iter().any(|rule| {
            rule["apiGroups"].as_array().unwrap().iter().any(|g| g == group)
                && rule["resources"].as_array().unwrap().iter().any(|r| r == resource)
                && ["CREATE", "UPDATE", "DELETE"]
                    .iter()
                    .all(|op| rule["operations"].as_array().unwrap().iter().any(|o| o == op))
        })
    };
    let mut unmatched = Vec::new();
    for &(group, kind) in DANGEROUS {
        let plural = ApiResource::from_gvk(&GroupVersionKind::gvk(group, "v1", kind)).plural;
        for resource in [plural.clone(), format!("{plural}/*")] {
            if !matched(group, &resource) {
                unmatched.push(format!("{group}/{resource}"));
            }
        }
    }
    for &(group, kind) in DANGEROUS_STATUS {
        let plural = ApiResource::from_gvk(&GroupVersionKind::gvk(group, "v1", kind)).plural;
        if !matched(group, &format!("{plural}/status")) {
            unmatched.push(format!("{group}/{plural}/status"));
        }
    }
    assert!(unmatched.is_empty(), "DANGEROUS kinds the policy does not refuse: {unmatched:?}");
}
