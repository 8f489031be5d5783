//! The same reconciler in every plugin language, against a real kube-apiserver + etcd: each
//! build of namespace-defaults (Rust, Python, JavaScript, Go, and the Python and JavaScript
//! sources on their shared engines) must leave the same cluster state.
//!
//! Every language test runs one scenario (defaults applied with the operator's settings, a
//! DefaultsApplied event, a deleted child repaired, opt-out removes the defaults) and compares
//! the objects it made, normalized (no UIDs, times or versions; the namespace name replaced),
//! with one expected snapshot. The Rust build's test proves the snapshot is what the reference
//! implementation produces, so all languages equal it and each other. The tests take turns
//! (one lock): every App watches all Namespaces, and two reconcilers of the same defaults at
//! once would make each other's objects.

use crate::common;

use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, ResourceQuota};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kubewasm_host::app::PluginFile;
use kubewasm_testenv::ControlPlane;
use serde_json::{Value, json};

use common::eventually;

const CONVERGE: Duration = Duration::from_secs(90);

/// One language test at a time (see the module doc).
static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The operator's config for every build: the demo's settings, a custom quota name, and the
/// limits the interpreters need (`limits` is ignored by nothing: Rust runs under it too).
const CONFIG: &str = r#"
limits:
  deadlineMs: 5000
  memoryBytes: 134217728
settings:
  optOutLabel: example.com/no-defaults
  quotaName: team-quota
  quota:
    pods: "20"
    requests.cpu: "2"
    requests.memory: 4Gi
"#;

/// What every build must leave in a fresh namespace `NS` whose UID is `NS-UID`.
fn expected() -> Value {
    let meta = |name: &str| {
        json!({
            "name": name, "namespace": "NS",
            // The host's mark of who made it (the authorizer's "mine").
            "labels": {"app.kubernetes.io/managed-by": "kubewasm-namespace-defaults", "kubewasm.dev/plugin": "namespace-defaults"},
            "ownerReferences": [{"apiVersion": "v1", "kind": "Namespace", "name": "NS", "uid": "NS-UID",
                                 "controller": true, "blockOwnerDeletion": true}],
        })
    };
    let manager = |fields: Value| {
        json!([{"manager": "kubewasm/namespace-defaults", "operation": "Apply", "fieldsType": "FieldsV1",
                "fieldsV1": fields}])
    };
    let owned_meta = json!({
        "f:labels": {"f:app.kubernetes.io/managed-by": {}, "f:kubewasm.dev/plugin": {}},
        "f:ownerReferences": {"k:{\"uid\":\"NS-UID\"}": {}},
    });
    json!({
        "quota": {
            "apiVersion": "v1", "kind": "ResourceQuota",
            "metadata": meta("team-quota"),
            "spec": {"hard": {"pods": "20", "requests.cpu": "2", "requests.memory": "4Gi"}},
            "managedFields": manager(json!({"f:metadata": owned_meta,
                "f:spec": {"f:hard": {"f:pods": {}, "f:requests.cpu": {}, "f:requests.memory": {}}}})),
        },
        "policy": {
            "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": meta("default-deny"),
            "spec": {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]},
            "managedFields": manager(json!({"f:metadata": owned_meta,
                "f:spec": {"f:podSelector": {}, "f:policyTypes": {}}})),
        },
        "event": {
            "type": "Normal", "reason": "DefaultsApplied", "action": "Reconcile",
            "reportingController": "kubewasm/namespace-defaults",
            "note": "applied ResourceQuota team-quota and NetworkPolicy default-deny",
            "regarding": {"apiVersion": "v1", "kind": "Namespace", "name": "NS"},
        },
    })
}

/// `object` without what differs between runs: the namespace's name and UID become `NS` and
/// `NS-UID`; server-set metadata goes; managed fields keep manager, operation and fields.
fn normalize(object: Value, ns: &str, ns_uid: &str) -> Value {
    let text = object.to_string().replace(ns_uid, "NS-UID").replace(&format!("\"{ns}\""), "\"NS\"");
    let mut v: Value = serde_json::from_str(&text).unwrap();
    let meta = v["metadata"].as_object_mut().unwrap();
    for server_set in ["uid", "resourceVersion", "creationTimestamp", "generation"] {
        meta.remove(server_set);
    }
    let managed = meta.remove("managedFields").unwrap_or_default();
    let managed: Vec<Value> = managed
        .as_array()
        .into_iter()
        .flatten()
        .map(|m| {
            json!({"manager": m["manager"], "operation": m["operation"], "fieldsType": m["fieldsType"],
                         "fieldsV1": m["fieldsV1"]})
        })
        .collect();
    v["managedFields"] = Value::Array(managed);
    v.as_object_mut().unwrap().remove("status");
    v
}

fn normalize_event(event: &Event, ns: &str, ns_uid: &str) -> Value {
    let regarding = event.regarding.as_ref().unwrap();
    let v = json!({
        "type": event.type_, "reason": event.reason, "action": event.action,
        "reportingController": event.reporting_controller, "note": event.note,
        "regarding": {"apiVersion": regarding.api_version, "kind": regarding.kind, "name": regarding.name},
    });
    serde_json::from_str(&v.to_string().replace(ns_uid, "NS-UID").replace(&format!("\"{ns}\""), "\"NS\"")).unwrap()
}

/// Runs the scenario with the build `file` of namespace-defaults (or its source, a `.py` or `.js` file
/// relative to `plugins/`); returns nothing, panics with a diff-friendly message when the state
/// differs from [`expected`].
async fn namespace_defaults_leaves_the_expected_state(language: &str, file: &str) {
    let Some(cp) = ControlPlane::shared() else { return };
    let _turn = TURN.lock().await;
    let client = cp.admin_client().await;
    let dir = tempfile::tempdir().unwrap();
    let wasm = match file.rsplit_once('.') {
        // A plugin given as source: the repository's file, on the host's engine of its language.
        Some((_, ext @ ("py" | "js"))) => {
            let source = common::plugin_source(file);
            let installed = format!("namespace-defaults.{ext}");
            common::install_source_file(dir.path(), &installed, "namespace_defaults_py.wasm", &source, CONFIG)
        }
        _ => common::install_plugin(dir.path(), "namespace-defaults", file, CONFIG),
    };
    let plugin = PluginFile {
        name: "namespace-defaults".into(),
        wasm: Some(wasm),
        config: Some(dir.path().join("namespace-defaults.yaml")),
    };
    let mut app = common::app(&client);
    app.add_plugin(&plugin).await.unwrap_or_else(|e| panic!("the {language} build does not load: {e:#}"));

    let ns = format!("lang-{language}-{}", std::process::id());
    let namespaces = Api::<Namespace>::all(client.clone());
    let created = namespaces
        .create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap())
        .await
        .unwrap();
    let uid = created.metadata.uid.unwrap();
    let quotas = Api::<ResourceQuota>::namespaced(client.clone(), &ns);
    let policies = Api::<NetworkPolicy>::namespaced(client.clone(), &ns);
    let quota = eventually("the quota", CONVERGE, || async { quotas.get_opt("team-quota").await.unwrap() }).await;
    let policy = eventually("the policy", CONVERGE, || async { policies.get_opt("default-deny").await.unwrap() }).await;
    let events = Api::<Event>::all(client.clone());
    let event = eventually("the DefaultsApplied event", CONVERGE, || async {
        let list = events.list(&ListParams::default()).await.unwrap();
        list.items.into_iter().find(|e| {
            e.reason.as_deref() == Some("DefaultsApplied")
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(ns.as_str())
        })
    })
    .await;
    let actual = json!({
        "quota": normalize(serde_json::to_value(&quota).unwrap(), &ns, &uid),
        "policy": normalize(serde_json::to_value(&policy).unwrap(), &ns, &uid),
        "event": normalize_event(&event, &ns, &uid),
    });
    assert_eq!(
        actual,
        expected(),
        "the {language} build's objects differ from the reference:\nactual:   {actual:#}\nexpected: {:#}",
        expected()
    );

    // A deleted child is repaired (Owns trigger → owner's key → reconcile).
    let old_uid = quota.metadata.uid.unwrap();
    quotas.delete("team-quota", &DeleteParams::default()).await.unwrap();
    eventually("the quota re-created", CONVERGE, || async {
        quotas.get_opt("team-quota").await.unwrap().filter(|q| q.metadata.uid.as_deref() != Some(&old_uid))
    })
    .await;

    // Opting out with the configured label removes both defaults.
    let label = json!({"metadata": {"labels": {"example.com/no-defaults": ""}}});
    namespaces.patch(&ns, &PatchParams::default(), &Patch::Merge(&label)).await.unwrap();
    eventually("the defaults removed after opt-out", CONVERGE, || async {
        let gone = quotas.get_opt("team-quota").await.unwrap().is_none()
            && policies.get_opt("default-deny").await.unwrap().is_none();
        gone.then_some(())
    })
    .await;
    assert!(app.shut_down(Duration::from_secs(10)).await, "the {language} build's reconciles finished in time");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rust_build_leaves_the_reference_state() {
    namespace_defaults_leaves_the_expected_state("rust", "namespace_defaults.wasm").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_build_leaves_the_same_state_as_the_rust_build() {
    namespace_defaults_leaves_the_expected_state("python", "namespace_defaults_py.wasm").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_source_on_the_shared_engine_leaves_the_same_state_as_the_rust_build() {
    let source = "python/namespace-defaults/namespace_defaults.py";
    namespace_defaults_leaves_the_expected_state("python-source", source).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_javascript_build_leaves_the_same_state_as_the_rust_build() {
    namespace_defaults_leaves_the_expected_state("js", "namespace_defaults_js.wasm").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_javascript_source_on_the_shared_engine_leaves_the_same_state_as_the_rust_build() {
    let source = "js/namespace-defaults/namespace-defaults.js";
    namespace_defaults_leaves_the_expected_state("js-source", source).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_go_build_leaves_the_same_state_as_the_rust_build() {
    namespace_defaults_leaves_the_expected_state("go", "namespace_defaults_go.wasm").await;
}
