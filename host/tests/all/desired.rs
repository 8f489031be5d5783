//! Contract 0.3's desired state end to end against a real kube-apiserver + etcd, through the
//! `fixture-desired` plugin: Fanout objects (a CRD of these tests) whose desired children are a
//! ConfigMap per selected namespace and whose desired status counts them. Each test's host
//! reconciles only its own Fanouts (the plugin's `selector` setting).

use crate::common;

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kubewasm_host::app::App;
use kubewasm_testenv::ControlPlane;
use serde_json::{Value, json};

use common::examples::{crd_established, create_namespace};
use common::hostile::calls;
use common::{eventually, metric_value};

const CONVERGE: Duration = Duration::from_secs(60);

/// The plugin's name in these tests, and so its mark on what it makes.
const PLUGIN: &str = "desired";

/// The Fanout CRD installed (cluster-scoped, with a status subresource), and the API of its
/// objects.
async fn fanouts(client: &kube::Client) -> Api<DynamicObject> {
    let open = json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true});
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "fanouts.desired.kubewasm.test"},
        "spec": {"group": "desired.kubewasm.test", "scope": "Cluster",
            "names": {"kind": "Fanout", "plural": "fanouts", "singular": "fanout", "listKind": "FanoutList"},
            "versions": [{"name": "v1", "served": true, "storage": true, "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": open, "status": open}}}}]}}))
    .unwrap();
    let params = PatchParams::apply("desired-tests").force();
    let crds = Api::<CustomResourceDefinition>::all(client.clone());
    crds.patch("fanouts.desired.kubewasm.test", &params, &Patch::Apply(&crd)).await.unwrap();
    crd_established(client, "fanouts.desired.kubewasm.test").await;
    let kind = GroupVersionKind::gvk("desired.kubewasm.test", "v1", "Fanout");
    Api::all_with(client.clone(), &ApiResource::from_gvk(&kind))
}

/// A host serving `fixture-desired` as plugin `desired`, for the Fanouts labelled
/// `kubewasm-test={id}`.
async fn desired_app(client: &kube::Client, id: &str) -> App {
    let config = format!("settings: {{selector: kubewasm-test={id}}}\n");
    let file = common::fixture_file(PLUGIN, "fixture_desired.wasm", &config);
    let mut app = common::app(client);
    app.add_plugin(&file).await.unwrap();
    eventually("readiness", CONVERGE, || async { app.readiness().is_ready().then_some(()) }).await;
    app
}

/// Namespaces `{id}-a` and `{id}-b`, selected by `kubewasm-test={id}`.
async fn selected_namespaces(client: &kube::Client, id: &str) -> [String; 2] {
    let names = [format!("{id}-a"), format!("{id}-b")];
    for ns in &names {
        create_namespace(client, ns, json!({"kubewasm-test": id, "kubewasm.dev/no-defaults": "true"})).await;
    }
    names
}

/// Creates Fanout `name` of test `id`, copying `copy` into the namespaces labelled
/// `kubewasm-test={id}`.
async fn create_fanout(fanouts: &Api<DynamicObject>, name: &str, id: &str, copy: &str, annotations: Value) {
    let fanout: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "desired.kubewasm.test/v1", "kind": "Fanout",
        "metadata": {"name": name, "labels": {"kubewasm-test": id}, "annotations": annotations},
        "spec": {"copy": copy, "namespaceSelector": format!("kubewasm-test={id}")}}))
    .unwrap();
    fanouts.create(&PostParams::default(), &fanout).await.unwrap();
}

/// The Fanout's `status` once `ready` holds for it.
async fn status_where(fanouts: &Api<DynamicObject>, name: &str, what: &str, ready: impl Fn(&Value) -> bool) -> Value {
    eventually(what, CONVERGE, || async {
        let status = fanouts.get(name).await.ok()?.data.get("status").cloned()?;
        ready(&status).then_some(status)
    })
    .await
}

fn config_maps(client: &kube::Client, ns: &str) -> Api<ConfigMap> {
    Api::namespaced(client.clone(), ns)
}

fn metrics(app: &App) -> String {
    prometheus::TextEncoder::new().encode_to_string(&app.registry().gather()).unwrap()
}

/// A ConfigMap named `name` in `ns` under the Fanout `owner` (a controller ownerReference), with
/// `labels`: what another plugin, or something unmarked, made under the same owner.
async fn under_owner(client: &kube::Client, ns: &str, name: &str, owner: &DynamicObject, labels: Value) {
    let reference = json!({"apiVersion": "desired.kubewasm.test/v1", "kind": "Fanout",
        "name": owner.metadata.name, "uid": owner.metadata.uid, "controller": true});
    let cm =
        serde_json::from_value(json!({"metadata": {"name": name, "labels": labels, "ownerReferences": [reference]}}))
            .unwrap();
    config_maps(client, ns).create(&PostParams::default(), &cm).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn desired_children_get_their_owner_and_status_and_only_the_plugins_unwanted_children_are_pruned() {
    let Some(cp) = ControlPlane::shared() else { return };
    let client = cp.admin_client().await;
    let fanouts = fanouts(&client).await;
    let id = cp.namespace("desired-prune").await;
    let [ns_a, ns_b] = selected_namespaces(&client, &id).await;
    let app = desired_app(&client, &id).await;
    let name = format!("{id}-fanout");
    create_fanout(&fanouts, &name, &id, "first", json!({})).await;

    let status = status_where(&fanouts, &name, "status: 2 copies", |s| s["copies"] == 2).await;
    assert_eq!(status["observedGeneration"], 1, "the desired status is applied as the plugin returned it");
    let fanout = fanouts.get(&name).await.unwrap();
    for ns in [&ns_a, &ns_b] {
        let copy = config_maps(&client, ns).get("first").await.unwrap();
        let owner = &copy.metadata.owner_references.as_ref().expect("the host added the owner")[0];
        assert_eq!((owner.uid.as_str(), owner.controller), (fanout.metadata.uid.as_deref().unwrap(), Some(true)));
        assert_eq!(copy.metadata.labels.unwrap()["kubewasm.dev/plugin"], PLUGIN, "the host marked the child");
    }
    under_owner(&client, &ns_a, "other-plugins", &fanout, json!({"kubewasm.dev/plugin": "other"})).await;
    under_owner(&client, &ns_a, "unmarked", &fanout, json!({})).await;

    // A renamed child: the new one is made and the old one pruned.
    let rename = json!({"spec": {"copy": "second"}});
    fanouts.patch(&name, &PatchParams::default(), &Patch::Merge(&rename)).await.unwrap();
    for ns in [&ns_a, &ns_b] {
        let api = config_maps(&client, ns);
        eventually("the renamed child made and the old one pruned", CONVERGE, || async {
            let (new, old) = (api.get_opt("second").await.unwrap(), api.get_opt("first").await.unwrap());
            (new.is_some() && old.is_none()).then_some(())
        })
        .await;
    }
    // A namespace that left the selection: its child is pruned.
    let leave = json!({"metadata": {"labels": {"kubewasm-test": null}}});
    Api::<Namespace>::all(client.clone()).patch(&ns_b, &PatchParams::default(), &Patch::Merge(&leave)).await.unwrap();
    status_where(&fanouts, &name, "status: 1 copy", |s| s["copies"] == 1 && s["observedGeneration"] == 2).await;
    let left_behind = config_maps(&client, &ns_b);
    eventually("the child of a namespace that left pruned", CONVERGE, || async {
        left_behind.get_opt("second").await.unwrap().is_none().then_some(())
    })
    .await;

    let api = config_maps(&client, &ns_a);
    assert!(api.get_opt("other-plugins").await.unwrap().is_some(), "another plugin's child under the owner is kept");
    assert!(api.get_opt("unmarked").await.unwrap().is_some(), "an unmarked child under the owner is kept");
    assert!(api.get_opt("second").await.unwrap().is_some(), "a wanted child is kept");
    let text = metrics(&app);
    let pruned =
        metric_value(&text, "kubewasm_plugin_host_calls_total", &[("function", "desired.prune"), ("result", "ok")]);
    assert_eq!(pruned, Some(3.0), "two renamed children and one that left, each pruned once:\n{text}");
    assert!(app.shut_down(Duration::from_secs(10)).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forbidden_child_fails_its_reconcile_after_the_others_are_applied_and_nothing_else() {
    let Some(cp) = ControlPlane::shared() else { return };
    let client = cp.admin_client().await;
    let fanouts = fanouts(&client).await;
    let id = cp.namespace("desired-forbidden").await;
    let [ns_a, ns_b] = selected_namespaces(&client, &id).await;
    let app = desired_app(&client, &id).await;
    let (bad, good) = (format!("{id}-bad"), format!("{id}-good"));
    create_fanout(&fanouts, &bad, &id, "bad", json!({"kubewasm.test/forbidden-child": "yes"})).await;
    create_fanout(&fanouts, &good, &id, "good", json!({})).await;

    status_where(&fanouts, &good, "the good Fanout converged", |s| s["copies"] == 2).await;
    for ns in [&ns_a, &ns_b] {
        let api = config_maps(&client, ns);
        eventually("the bad Fanout's allowed children applied", CONVERGE, || async {
            api.get_opt("bad").await.unwrap()
        })
        .await;
    }
    eventually("the bad Fanout's reconcile failed and is retried", CONVERGE, || async {
        let errors =
            metric_value(&metrics(&app), "controller_runtime_reconcile_errors_total", &[("controller", PLUGIN)]);
        errors.filter(|&n| n >= 2.0)
    })
    .await;
    let status = fanouts.get(&bad).await.unwrap().data.get("status").cloned();
    assert_eq!(status, None, "a desired state not made so leaves the status unwritten");
    let text = metrics(&app);
    let refused = metric_value(
        &text,
        "kubewasm_plugin_host_calls_total",
        &[("function", "desired.apply"), ("result", "forbidden")],
    );
    assert!(refused.is_some_and(|n| n >= 1.0), "the Secret was refused by the host:\n{text}");
    assert!(app.shut_down(Duration::from_secs(10)).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_desired_state_that_changes_nothing_sends_nothing() {
    let Some(cp) = ControlPlane::shared() else { return };
    let client = cp.admin_client().await;
    let fanouts = fanouts(&client).await;
    let id = cp.namespace("desired-unchanged").await;
    selected_namespaces(&client, &id).await;
    let app = desired_app(&client, &id).await;
    let name = format!("{id}-fanout");
    create_fanout(&fanouts, &name, &id, "copy", json!({})).await;
    status_where(&fanouts, &name, "status: 2 copies", |s| s["copies"] == 2).await;
    let writes = |outcome: &'static str| {
        let text = metrics(&app);
        metric_value(&text, "kubewasm_plugin_writes_total", &[("plugin", PLUGIN), ("outcome", outcome)]).unwrap_or(0.0)
    };
    let reconciles = || {
        let text = metrics(&app);
        metric_value(&text, "controller_runtime_reconcile_total", &[("controller", PLUGIN), ("result", "success")])
            .unwrap_or(0.0)
    };
    // Settled: the reconciles the plugin's own writes triggered are over.
    let settled = eventually("no write sent in a reconcile", CONVERGE, || async {
        let (sent, done) = (writes("sent"), reconciles());
        let annotate = json!({"metadata": {"annotations": {"kubewasm.test/touch": done.to_string()}}});
        fanouts.patch(&name, &PatchParams::default(), &Patch::Merge(&annotate)).await.unwrap();
        eventually("the touch reconciled", CONVERGE, || async { (reconciles() > done).then_some(()) }).await;
        (writes("sent") == sent).then_some(sent)
    })
    .await;
    let unchanged = writes("unchanged");
    assert!(unchanged >= 3.0, "two children and the status answered from the cache, not sent: {unchanged}");
    assert_eq!(writes("sent"), settled);
    assert!(app.shut_down(Duration::from_secs(10)).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_hosts_authorizer_off_the_api_server_refuses_a_prune_the_plugins_identity_may_not_make() {
    use k8s_openapi::api::rbac::v1::ClusterRole;
    use kube::api::{DeleteParams, ListParams};
    let Some(cp) = ControlPlane::shared() else { return };
    let client = cp.admin_client().await;
    let fanouts = fanouts(&client).await;
    let id = cp.namespace("desired-indep").await;
    let named = format!("{id}-a");
    create_namespace(&client, &named, json!({"kubewasm-test": id, "kubewasm.dev/no-defaults": "true"})).await;
    let plugin = "desired-indep";
    let file =
        common::fixture_file(plugin, "fixture_desired.wasm", &format!("settings: {{selector: kubewasm-test={id}}}\n"));
    let mut app = super::independence::unguarded_host(&client);
    app.add_plugin(&file).await.unwrap();
    let name = format!("{id}-fanout");
    create_fanout(&fanouts, &name, &id, "first", json!({})).await;
    let children = config_maps(&client, &named);
    eventually("the first child", CONVERGE, || async { children.get_opt("first").await.unwrap() }).await;
    // With its authorizer off the host sends what the plugin wrote, unmarked; marked as the host
    // would have, the child is one the plugin made, so the host prunes it once it is unwanted.
    let mark = json!({"metadata": {"labels": {"kubewasm.dev/plugin": plugin}}});
    children.patch("first", &PatchParams::default(), &Patch::Merge(&mark)).await.unwrap();

    // The plugin's identity loses the right to delete ConfigMaps (its RBAC, made from its grants
    // at load, edited as an operator might), and the API server has seen the edit.
    let roles = Api::<ClusterRole>::all(client.clone());
    let mine = ListParams::default().labels(&format!("{}={plugin}", kubewasm_host::rbac::RBAC_LABEL));
    let mut role = roles.list(&mine).await.unwrap().items.pop().expect("the plugin's ClusterRole, made at load");
    let role_name = role.metadata.name.clone().unwrap();
    for rule in role.rules.iter_mut().flatten() {
        if rule.resources.iter().flatten().any(|r| r == "configmaps") {
            rule.verbs.retain(|v| v != "delete" && v != "deletecollection" && v != "*");
            if rule.verbs.is_empty() {
                rule.verbs.push("get".into());
            }
        }
    }
    roles.replace(&role_name, &PostParams::default(), &role).await.unwrap();
    let identity = kubewasm_host::identity::Identities::host(client.clone()).impersonating("kubewasm-system");
    let as_plugin = Api::<ConfigMap>::namespaced(identity.client(plugin), &named);
    eventually("the identity refused a delete", CONVERGE, || async {
        let dry_run = DeleteParams { dry_run: true, ..DeleteParams::default() };
        let refused = as_plugin.delete("first", &dry_run).await.err()?;
        refused.to_string().contains("forbidden").then_some(())
    })
    .await;

    // A renamed child: the new one is applied, and the old one's prune is the API server's to refuse.
    let rename = json!({"spec": {"copy": "second"}});
    fanouts.patch(&name, &PatchParams::default(), &Patch::Merge(&rename)).await.unwrap();
    eventually("the prune refused by the API server", CONVERGE, || async {
        (calls(&app, plugin, "desired.prune", "forbidden") >= 1.0).then_some(())
    })
    .await;
    assert!(children.get_opt("second").await.unwrap().is_some(), "the wanted child was applied");
    assert!(children.get_opt("first").await.unwrap().is_some(), "the refused prune deleted nothing");
    let status = fanouts.get(&name).await.unwrap().data["status"].clone();
    assert_eq!(status["observedGeneration"], 1, "a prune that failed leaves the status as it was: {status}");
    assert!(app.shut_down(Duration::from_secs(15)).await);
}

/// A writer that answers a child's apply only once another is in flight beside it, and refuses
/// it as sent alone after a while: applies sent one after another never meet.
struct Rendezvous {
    recording: std::sync::Arc<kubewasm_host::plugin::api::RecordingWriter>,
    met: tokio::sync::Barrier,
}

#[async_trait::async_trait]
impl kubewasm_host::plugin::api::ApiWriter for Rendezvous {
    async fn send(
        &self,
        caller: &kubewasm_host::plugin::api::Caller,
        call: &kubewasm_host::plugin::api::ApiCall,
    ) -> Result<kubewasm_host::plugin::api::ApiReply, kubewasm_host::plugin::api::CallError> {
        use kubewasm_host::plugin::api::{ApiCall, CallError};
        if let ApiCall::Apply { .. } = call
            && tokio::time::timeout(Duration::from_secs(5), self.met.wait()).await.is_err()
        {
            return Err(CallError::Unavailable("sent alone: no other apply was in flight".into()));
        }
        self.recording.send(caller, call).await
    }

    async fn scope(
        &self,
        kind: &GroupVersionKind,
    ) -> Result<kube::discovery::Scope, kubewasm_host::plugin::api::CallError> {
        Ok(if kind.kind == "Fanout" {
            kube::discovery::Scope::Cluster
        } else {
            kubewasm_host::plugin::api::builtin_scope(kind)
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_desired_states_children_are_in_flight_at_once() {
    use kubewasm_host::plugin::api::RecordingWriter;
    use kubewasm_host::plugin::api::testing::MemoryCache;
    use kubewasm_host::plugin::{ObjectKey, PluginConfig, Runtime, RuntimeConfig};
    let cache = std::sync::Arc::new(MemoryCache::default());
    cache.insert(&json!({"apiVersion": "desired.kubewasm.test/v1", "kind": "Fanout",
        "metadata": {"name": "f", "uid": "uid-f", "generation": 1, "labels": {"kubewasm-test": "t"}},
        "spec": {"copy": "copy", "namespaceSelector": "kubewasm-test=t"}}));
    for ns in ["t-a", "t-b"] {
        cache.insert(&json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": ns, "uid": format!("uid-{ns}"), "labels": {"kubewasm-test": "t"}}}));
    }
    let recording = std::sync::Arc::new(RecordingWriter::serving(cache.clone()));
    let writer = std::sync::Arc::new(Rendezvous { recording: recording.clone(), met: tokio::sync::Barrier::new(2) });
    let config_file = common::fixture_file(PLUGIN, "fixture_desired.wasm", "settings: {selector: kubewasm-test=t}\n");
    let config = PluginConfig::from_yaml(&std::fs::read_to_string(config_file.config.unwrap()).unwrap()).unwrap();
    let runtime = Runtime::new(RuntimeConfig::default().cache_dir(common::test_compile_cache())).unwrap();
    let plugin =
        runtime.load(PLUGIN, common::plugin_wasm("fixture_desired.wasm"), config, cache, writer).await.unwrap();

    let result = plugin.reconcile(&ObjectKey::new(None, "f"), 0).await;
    assert!(result.is_ok(), "the two children's applies met in flight: {result:?}");
    let applied =
        recording.calls().iter().filter(|c| matches!(c, kubewasm_host::plugin::api::ApiCall::Apply { .. })).count();
    assert_eq!(applied, 2, "one child a selected namespace");
}
