use serde_json::{Value, json};

use super::*;

const MANAGER: &str = "kubewasm/nd";

/// namespace-defaults' NetworkPolicy as the plugin applies it (with the host's mark).
fn policy_body() -> Value {
    json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": {
            "name": "default-deny", "namespace": "a",
            "labels": {"app.kubernetes.io/managed-by": "nd", "kubewasm.dev/plugin": "nd"},
            "ownerReferences": [{"apiVersion": "v1", "kind": "Namespace", "name": "a", "uid": "u1", "controller": true}]
        },
        "spec": {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}
    })
}

/// The object as the API server stores it: the body plus server-set metadata.
fn policy_cached() -> Value {
    let mut cached = policy_body();
    let meta = cached["metadata"].as_object_mut().unwrap();
    meta.insert("uid".into(), json!("p1"));
    meta.insert("resourceVersion".into(), json!("7"));
    meta.insert("generation".into(), json!(1));
    cached
}

/// The fieldsV1 the API server records for [`policy_body`] (policyTypes and podSelector are
/// atomic; ownerReferences a map list keyed by uid).
fn policy_fields() -> Value {
    json!({
        "f:metadata": {
            "f:labels": {"f:app.kubernetes.io/managed-by": {}, "f:kubewasm.dev/plugin": {}},
            "f:ownerReferences": {"k:{\"uid\":\"u1\"}": {
                ".": {}, "f:apiVersion": {}, "f:controller": {}, "f:kind": {}, "f:name": {}, "f:uid": {}
            }}
        },
        "f:spec": {"f:podSelector": {}, "f:policyTypes": {}}
    })
}

fn entries(manager: &str, api_version: &str, subresource: Option<&str>, fields: Value) -> Vec<u8> {
    let mut entry = json!({
        "manager": manager, "operation": "Apply", "apiVersion": api_version,
        "time": "2026-01-01T00:00:00Z", "fieldsType": "FieldsV1", "fieldsV1": fields
    });
    if let Some(sub) = subresource {
        entry["subresource"] = json!(sub);
    }
    serde_json::to_vec(&[entry]).unwrap()
}

fn check(body: &Value, cached: &Value, managed: &[u8]) -> Result<()> {
    Apply { body, cached, managed_fields: Some(managed), manager: MANAGER, status: false, builtin: true }
        .changes_nothing()
}

fn policy_managed() -> Vec<u8> {
    entries(MANAGER, "networking.k8s.io/v1", None, policy_fields())
}

#[test]
fn the_same_apply_again_changes_nothing() {
    assert_eq!(check(&policy_body(), &policy_cached(), &policy_managed()), Ok(()));
}

#[test]
fn a_field_dropped_from_the_body_would_be_released_so_the_apply_is_sent() {
    let mut body = policy_body();
    body["metadata"]["labels"].as_object_mut().unwrap().remove("app.kubernetes.io/managed-by");
    let err = check(&body, &policy_cached(), &policy_managed()).unwrap_err();
    assert_eq!(err.at, "metadata.labels.app.kubernetes.io/managed-by");
}

#[test]
fn a_value_another_manager_changed_is_sent_to_be_taken_back() {
    let mut cached = policy_cached();
    cached["spec"]["policyTypes"] = json!(["Ingress"]);
    let err = check(&policy_body(), &cached, &policy_managed()).unwrap_err();
    assert_eq!((err.at.as_str(), err.why), ("spec.policyTypes", "a list of another length"));
    // Had it been taken over, the manager would not own it any more.
    let mut fields = policy_fields();
    fields["f:spec"].as_object_mut().unwrap().remove("f:policyTypes");
    let managed = entries(MANAGER, "networking.k8s.io/v1", None, fields);
    assert!(check(&policy_body(), &policy_cached(), &managed).is_err());
}

#[test]
fn fields_the_server_defaulted_do_not_stop_elision() {
    let body = json!({
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": "s", "namespace": "a"},
        "spec": {"ports": [{"port": 80, "protocol": "TCP"}], "selector": {"app": "x"}}
    });
    let mut cached = body.clone();
    cached["spec"]["type"] = json!("ClusterIP");
    cached["spec"]["sessionAffinity"] = json!("None");
    cached["spec"]["ports"][0]["targetPort"] = json!(80);
    let fields = json!({"f:spec": {
        "f:ports": {"k:{\"port\":80,\"protocol\":\"TCP\"}": {".": {}, "f:port": {}, "f:protocol": {}}},
        "f:selector": {}
    }});
    let managed = entries(MANAGER, "v1", None, fields);
    assert_eq!(check(&body, &cached, &managed), Ok(()));
}

#[test]
fn quantities_of_built_in_kinds_compare_by_value_and_nothing_else_does() {
    let body = |cpu: &str| {
        json!({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "q", "namespace": "a",
            "labels": {"size": cpu}}, "spec": {"hard": {"requests.cpu": cpu}}})
    };
    let fields = json!({"f:metadata": {"f:labels": {"f:size": {}}}, "f:spec": {"f:hard": {"f:requests.cpu": {}}}});
    let managed = entries(MANAGER, "v1", None, fields);
    let mut cached = body("1000m");
    cached["spec"]["hard"]["requests.cpu"] = json!("1");
    assert_eq!(check(&body("1000m"), &cached, &managed), Ok(()), "spec.hard holds canonical quantities");
    assert_eq!(check(&body("1001m"), &cached, &managed).unwrap_err().at, "metadata.labels.size");
    cached["metadata"]["labels"]["size"] = json!("1");
    assert_eq!(check(&body("1000m"), &cached, &managed).unwrap_err().at, "metadata.labels.size", "a label is a string");
    let mut custom_cached = body("1000m");
    custom_cached["metadata"]["labels"]["size"] = json!("1");
    let custom = Apply {
        body: &body("1"),
        cached: &custom_cached,
        managed_fields: Some(&managed),
        manager: MANAGER,
        status: false,
        builtin: false,
    };
    assert_eq!(custom.changes_nothing().unwrap_err().at, "spec.hard.requests.cpu", "a custom kind keeps its strings");
}

#[test]
fn an_empty_list_owned_as_a_whole_matches_an_absent_one() {
    let body = |types: Value| {
        json!({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": "p", "namespace": "a"}, "spec": {"podSelector": {}, "policyTypes": types}})
    };
    let cached = json!({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": {"name": "p", "namespace": "a"}, "spec": {"podSelector": {}}});
    let owned =
        entries(MANAGER, "networking.k8s.io/v1", None, json!({"f:spec": {"f:podSelector": {}, "f:policyTypes": {}}}));
    assert_eq!(check(&body(json!([])), &cached, &owned), Ok(()));
    let never_owned = entries(MANAGER, "networking.k8s.io/v1", None, json!({"f:spec": {"f:podSelector": {}}}));
    assert_eq!(
        check(&body(json!([])), &cached, &never_owned).unwrap_err().why,
        "an empty list never owned: atomic or not"
    );
}

#[test]
fn a_status_apply_compares_only_status_against_the_status_entry() {
    let body = json!({"apiVersion": "example.dev/v1", "kind": "Thing", "metadata": {"name": "t", "namespace": "a"},
        "status": {"phase": "Ready", "conditions": [{"type": "Ready", "status": "True"}]}});
    let mut cached = body.clone();
    cached["spec"] = json!({"size": 3});
    let fields = json!({"f:status": {"f:phase": {}, "f:conditions": {
        "k:{\"type\":\"Ready\"}": {".": {}, "f:type": {}, "f:status": {}}}}});
    let status = |managed: &[u8]| {
        Apply {
            body: &body,
            cached: &cached,
            managed_fields: Some(managed),
            manager: MANAGER,
            status: true,
            builtin: false,
        }
        .changes_nothing()
    };
    assert_eq!(status(&entries(MANAGER, "example.dev/v1", Some("status"), fields.clone())), Ok(()));
    let main_entry = entries(MANAGER, "example.dev/v1", None, fields);
    assert_eq!(status(&main_entry).unwrap_err().why, "the manager owns no fields by Apply");
}

#[test]
fn only_the_managers_own_entry_of_this_version_counts() {
    let other = entries("kubewasm/other", "networking.k8s.io/v1", None, policy_fields());
    assert_eq!(check(&policy_body(), &policy_cached(), &other).unwrap_err().why, "the manager owns no fields by Apply");
    let older = entries(MANAGER, "networking.k8s.io/v1beta1", None, policy_fields());
    assert!(check(&policy_body(), &policy_cached(), &older).is_err());
}

#[test]
fn a_body_with_a_precondition_or_a_null_is_sent() {
    let mut body = policy_body();
    body["metadata"]["resourceVersion"] = json!("7");
    assert_eq!(check(&body, &policy_cached(), &policy_managed()).unwrap_err().at, "metadata.resourceVersion");
    let mut body = policy_body();
    body["spec"]["podSelector"] = Value::Null;
    assert_eq!(check(&body, &policy_cached(), &policy_managed()).unwrap_err().why, "a null in the body");
}

#[test]
fn list_items_keyed_by_name_are_matched_in_order_and_none_may_be_dropped() {
    let body = |names: &[&str]| {
        let containers: Vec<Value> = names.iter().map(|n| json!({"name": n, "image": "nginx"})).collect();
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "a"},
            "spec": {"template": {"spec": {"containers": containers}}}})
    };
    let item = json!({".": {}, "f:name": {}, "f:image": {}});
    let fields = json!({"f:spec": {"f:template": {"f:spec": {"f:containers": {
        "k:{\"name\":\"a\"}": item.clone(), "k:{\"name\":\"b\"}": item}}}}});
    let managed = entries(MANAGER, "apps/v1", None, fields);
    let mut cached = body(&["a", "b"]);
    cached["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"] = json!("Always");
    cached["spec"]["template"]["spec"]["dnsPolicy"] = json!("ClusterFirst");
    assert_eq!(check(&body(&["a", "b"]), &cached, &managed), Ok(()), "defaults inside owned items are not named");
    assert_eq!(check(&body(&["b", "a"]), &cached, &managed).unwrap_err().why, "items in another order");
    assert_eq!(check(&body(&["a"]), &cached, &managed).unwrap_err().why, "an owned item the body drops");
    assert_eq!(check(&body(&["a", "b", "c"]), &cached, &managed).unwrap_err().why, "an item the manager does not own");
}

#[test]
fn an_atomic_map_must_equal_the_object_whole() {
    let body = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "a"},
        "spec": {"selector": {"matchLabels": {"app": "x"}}}});
    let managed = entries(MANAGER, "apps/v1", None, json!({"f:spec": {"f:selector": {}}}));
    assert_eq!(check(&body, &body, &managed), Ok(()));
    let mut cached = body.clone();
    cached["spec"]["selector"]["matchExpressions"] = json!([{"key": "k", "operator": "Exists"}]);
    assert_eq!(check(&body, &cached, &managed).unwrap_err().why, "a key the atomic body lacks");
}

#[test]
fn a_list_key_field_the_server_defaulted_matches_unless_the_manager_named_it() {
    let body = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s", "namespace": "a"},
        "spec": {"ports": [{"port": 80}]}});
    let mut cached = body.clone();
    cached["spec"]["ports"][0]["protocol"] = json!("TCP");
    let item = |fields: Value| json!({"f:spec": {"f:ports": {"k:{\"port\":80,\"protocol\":\"TCP\"}": fields}}});
    let defaulted = entries(MANAGER, "v1", None, item(json!({".": {}, "f:port": {}})));
    assert_eq!(check(&body, &cached, &defaulted), Ok(()), "the owned key holds the default");
    let named = entries(MANAGER, "v1", None, item(json!({".": {}, "f:port": {}, "f:protocol": {}})));
    assert_eq!(check(&body, &cached, &named).unwrap_err().why, "an owned field the body drops");
}
