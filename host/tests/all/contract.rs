//! Contract 0.2's capabilities end to end against a real kube-apiserver + etcd, through the
//! `fixture-contract` plugin (built with the Rust SDK, so a 0.3 component, whose imports are
//! 0.2's), and a 0.1 component (`fixture-legacy`) and a 0.2 one (`fixture-frozen-0-2`) served
//! beside it.

use crate::common;

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kubewasm_host::app::{App, PluginFile};
use kubewasm_testenv::ControlPlane;
use serde_json::json;

use common::{eventually, metric_value};

const CONVERGE: Duration = Duration::from_secs(60);

/// An app serving `fixture-contract` for namespace `ns` with for-filter `predicates`.
async fn contract_app(client: &kube::Client, dir: &std::path::Path, ns: &str, predicates: &str) -> App {
    let config = format!(
        "grants: {{read: [Secret], write: [ConfigMap, Namespace, Secret], sensitive: {{namespaces: [{ns}]}}}}\nsettings: {{namespace: {ns}, predicates: [{predicates}]}}\n"
    );
    let wasm = common::install_plugin(dir, "contract", "fixture_contract.wasm", &config);
    let file = PluginFile { name: "contract".into(), wasm: Some(wasm), config: Some(dir.join("contract.yaml")) };
    let mut app = common::app(client);
    app.add_plugin(&file).await.unwrap();
    eventually("readiness", CONVERGE, || async { app.readiness().is_ready().then_some(()) }).await;
    app
}

/// Creates ConfigMap `name` with `labels` and `annotations`.
async fn config_map(
    api: &Api<ConfigMap>,
    name: &str,
    labels: serde_json::Value,
    annotations: serde_json::Value,
) -> ConfigMap {
    let cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": name, "labels": labels, "annotations": annotations}}))
            .unwrap();
    api.create(&PostParams::default(), &cm).await.unwrap()
}

/// A ConfigMap the plugin reconciles, told to do `todo`.
async fn told(api: &Api<ConfigMap>, name: &str, todo: &str) -> ConfigMap {
    config_map(api, name, json!({"kubewasm.test/contract": "yes"}), json!({"kubewasm.test/do": todo})).await
}

/// The plugin's log of `name` once `ready` holds for it.
async fn log_where(
    api: &Api<ConfigMap>,
    name: &str,
    what: &str,
    ready: impl Fn(&BTreeMap<String, String>) -> bool,
) -> BTreeMap<String, String> {
    eventually(what, CONVERGE, || async {
        let log = api.get_opt(&format!("log-{name}")).await.unwrap()?.data.unwrap_or_default();
        ready(&log).then_some(log)
    })
    .await
}

fn count_is(n: u64) -> impl Fn(&BTreeMap<String, String>) -> bool {
    move |log| log.get("count").and_then(|c| c.parse::<u64>().ok()) == Some(n)
}

fn metrics(app: &App) -> String {
    prometheus::TextEncoder::new().encode_to_string(&app.registry().gather()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminal_error_is_counted_and_not_retried_while_retry_kinds_follow_their_policy() {
    let Some(cp) = ControlPlane::shared() else { return };
    let client = cp.admin_client().await;
    let ns = cp.namespace("contract-errors").await;
    let dir = tempfile::tempdir().unwrap();
    let app = contract_app(&client, dir.path(), &ns, "").await;
    let api = Api::<ConfigMap>::namespaced(client.clone(), &ns);

    told(&api, "fatal", "terminal").await;
    let terminal = eventually("the terminal error counted", CONVERGE, || async {
        let text = metrics(&app);
        let n =
            metric_value(&text, "controller_runtime_terminal_reconcile_errors_total", &[("controller", "contract")]);
        n.filter(|n| *n >= 1.0).map(|n| (n, text))
    })
    .await;
    assert_eq!(terminal.0, 1.0);
    // The worker settles a key before the counter is read: a retry would show here already.
    let retries = metric_value(&terminal.1, "workqueue_retries_total", &[("name", "contract")]).unwrap_or(0.0);
    assert_eq!(retries, 0.0, "a terminal error is neither rate-limited nor delayed");
    assert_eq!(log_where(&api, "fatal", "the terminal reconcile's log", count_is(1)).await["attempts"], "0");

    // requeue-after: retried after its delay, the attempt never advances; retryable: backoff.
    told(&api, "waiting", "requeue").await;
    told(&api, "flaky", "retry").await;
    let waiting = log_where(&api, "waiting", "three reconciles of requeue-after", count_is(3)).await;
    assert_eq!(waiting["attempts"], "0,0,0", "requeue-after does not advance the backoff");
    let flaky = log_where(&api, "flaky", "three reconciles of a retryable error", count_is(3)).await;
    assert_eq!(flaky["attempts"], "0,1,2", "retryable errors back off");
    let text = metrics(&app);
    let terminal =
        metric_value(&text, "controller_runtime_terminal_reconcile_errors_total", &[("controller", "contract")]);
    assert_eq!(terminal, Some(1.0), "only the terminal error counts as terminal");
    assert!(app.shut_down(Duration::from_secs(10)).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preconditions_and_propagation_reach_the_api_server_on_patch_and_delete() {
    let Some(cp) = ControlPlane::shared() else { return };
    let client = cp.admin_client().await;
    let ns = cp.namespace("contract-pre").await;
    let dir = tempfile::tempdir().unwrap();
    // ConfigMaps have no generation: with generation-changed no update retriggers the plugin.
    let app = contract_app(&client, dir.path(), &ns, "generation").await;
    let api = Api::<ConfigMap>::namespaced(client.clone(), &ns);

    config_map(&api, "x-victim", json!({}), json!({})).await;
    told(&api, "x", "preconditions").await;
    let log = log_where(&api, "x", "the preconditions results", |l| l.contains_key("delete-foreground")).await;
    assert_eq!(log["stale-rv"], "conflict", "{log:?}");
    assert_eq!(log["wrong-uid"], "conflict", "{log:?}");
    assert_eq!(log["as-read"], "ok", "{log:?}");
    assert_eq!(log["delete-wrong-uid"], "conflict", "{log:?}");
    assert_eq!(log["delete-foreground"], "ok", "{log:?}");
    let x = api.get("x").await.unwrap();
    assert_eq!(x.metadata.annotations.unwrap().get("kubewasm.test/patched").map(String::as_str), Some("yes"));
    // No garbage collector runs here: a foreground delete leaves its finalizer for it.
    let victim = api.get("x-victim").await.unwrap();
    assert!(victim.metadata.deletion_timestamp.is_some(), "the victim is being deleted");
    let finalizers = victim.metadata.finalizers.unwrap_or_default();
    assert!(finalizers.contains(&"foregroundDeletion".to_owned()), "{finalizers:?}");
    assert!(app.shut_down(Duration::from_secs(10)).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cached_lists_page_in_key_order_and_take_field_selectors() {
    let Some(cp) = ControlPlane::shared() else { return };
    let client = cp.admin_client().await;
    let ns = cp.namespace("contract-list").await;
    let api = Api::<ConfigMap>::namespaced(client.clone(), &ns);
    for i in [3, 0, 4, 1, 2] {
        config_map(&api, &format!("item-{i}"), json!({"kubewasm.test/item": "yes"}), json!({})).await;
    }
    config_map(&api, "item-other", json!({"kubewasm.test/item": "no"}), json!({})).await;
    let dir = tempfile::tempdir().unwrap();
    let app = contract_app(&client, dir.path(), &ns, "generation").await;

    told(&api, "lister", "list").await;
    let log = log_where(&api, "lister", "the list results", |l| l.contains_key("names")).await;
    assert_eq!(log["names"], "item-1,item-2,item-3,item-4", "label and field selected, in name order");
    assert_eq!(log["pages"], "2", "4 objects at a limit of 2");
    assert_eq!(log["unsupported-field"], "invalid", "a field the cache cannot select is an error, not ignored");
    assert!(app.shut_down(Duration::from_secs(10)).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_uncached_get_reads_its_own_write_is_granted_like_a_read_and_counted_apart() {
    let Some(cp) = ControlPlane::shared() else { return };
    let client = cp.admin_client().await;
    let ns = cp.namespace("contract-get").await;
    let dir = tempfile::tempdir().unwrap();
    let app = contract_app(&client, dir.path(), &ns, "generation").await;
    let api = Api::<ConfigMap>::namespaced(client.clone(), &ns);

    told(&api, "reader", "get").await;
    let log = log_where(&api, "reader", "the get results", |l| l.contains_key("fresh-uncached")).await;
    assert_eq!(log["fresh-uncached"], "found", "an object written in the same reconcile");
    assert_eq!(log["not-granted"], "forbidden", "a kind the plugin did not register");
    let text = metrics(&app);
    let gets = metric_value(
        &text,
        "kubewasm_plugin_host_calls_total",
        &[("plugin", "contract"), ("function", "client.get"), ("result", "ok")],
    );
    assert!(gets.is_some_and(|n| n >= 1.0), "uncached reads have their own series: {gets:?}");
    assert!(app.shut_down(Duration::from_secs(10)).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_is_patched_and_applied_with_an_explicit_force() {
    let Some(cp) = ControlPlane::shared() else { return };
    let client = cp.admin_client().await;
    let ns = cp.namespace("contract-status").await;
    // Another manager owns the condition the plugin will apply.
    let namespaces = Api::<Namespace>::all(client.clone());
    let theirs = json!({"status": {"conditions": [{"type": "KubewasmContract", "status": "Unknown", "reason": "Theirs", "message": "m"}]}});
    namespaces
        .patch_status(
            &ns,
            &PatchParams::apply("e2e-other"),
            &Patch::Apply(
                &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}, "status": theirs["status"]}),
            ),
        )
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let app = contract_app(&client, dir.path(), &ns, "generation").await;
    let api = Api::<ConfigMap>::namespaced(client.clone(), &ns);

    told(&api, "stat", "status").await;
    let log = log_where(&api, "stat", "the status results", |l| l.contains_key("patch-status")).await;
    assert_eq!(log["apply-status-unforced"], "conflict", "another manager's field is not taken silently: {log:?}");
    assert_eq!(log["apply-status-forced"], "ok", "{log:?}");
    assert_eq!(log["patch-status"], "ok", "{log:?}");
    let conditions = namespaces.get(&ns).await.unwrap().status.unwrap().conditions.unwrap_or_default();
    let ours = conditions.iter().find(|c| c.type_ == "KubewasmContract").expect("the condition");
    assert_eq!(ours.status, "True", "the status patch came last");
    assert!(app.shut_down(Duration::from_secs(10)).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_selector_hides_nothing_from_owns_or_the_cache_and_map_errors_retry_then_drop() {
    let Some(cp) = ControlPlane::shared() else { return };
    let client = cp.admin_client().await;
    let ns = cp.namespace("contract-watch").await;
    let dir = tempfile::tempdir().unwrap();
    let app = contract_app(&client, dir.path(), &ns, "generation").await;
    let api = Api::<ConfigMap>::namespaced(client.clone(), &ns);
    let secrets = Api::<Secret>::namespaced(client.clone(), &ns);
    let secret = |name: &str, labels: serde_json::Value, owner: Option<&ConfigMap>| {
        let refs = owner.map(|o| {
            json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": o.metadata.name, "uid": o.metadata.uid, "controller": true}])
        });
        serde_json::from_value::<Secret>(json!({"metadata": {"name": name, "labels": labels, "ownerReferences": refs}}))
            .unwrap()
    };

    let owner = told(&api, "owner", "owned").await;
    log_where(&api, "owner", "the first reconcile", count_is(1)).await;
    // Not labelled for the watch: 0.1 would have hidden it from Owns and the cache.
    secrets.create(&PostParams::default(), &secret("s-owned", json!({}), Some(&owner))).await.unwrap();
    let log = log_where(&api, "owner", "a reconcile through Owns", count_is(2)).await;
    assert_eq!(log["secrets"], "s-owned", "the cache shows the Secret the watch does not select");

    // Selected by the watch: mapped to the ConfigMap its label names.
    told(&api, "target", "").await;
    log_where(&api, "target", "the first reconcile of target", count_is(1)).await;
    let mapped = secret("s-watched", json!({"kubewasm.test/watched": "yes", "kubewasm.test/for": "target"}), None);
    secrets.create(&PostParams::default(), &mapped).await.unwrap();
    log_where(&api, "target", "a reconcile through the watch's map", count_is(2)).await;

    // map fails: retried with backoff a bounded number of times, then dropped and counted.
    let failing = secret("s-fail", json!({"kubewasm.test/watched": "yes", "kubewasm.test/map": "fail"}), None);
    secrets.create(&PostParams::default(), &failing).await.unwrap();
    eventually("the failing map dropped after its retries", CONVERGE, || async {
        let text = metrics(&app);
        metric_value(&text, "kubewasm_controller_map_dropped_total", &[("controller", "contract")])
            .filter(|n| *n >= 1.0)
    })
    .await;
    assert!(app.shut_down(Duration::from_secs(10)).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn predicates_drop_updates_without_the_changes_they_name() {
    let Some(cp) = ControlPlane::shared() else { return };
    let client = cp.admin_client().await;
    let ns = cp.namespace("contract-pred").await;
    let dir = tempfile::tempdir().unwrap();
    let app = contract_app(&client, dir.path(), &ns, "labels").await;
    let api = Api::<ConfigMap>::namespaced(client.clone(), &ns);

    told(&api, "p", "").await;
    log_where(&api, "p", "the add", count_is(1)).await;
    let data = json!({"data": {"k": "v"}});
    api.patch("p", &PatchParams::default(), &Patch::Merge(&data)).await.unwrap();
    // One worker takes keys in order: once a later add is reconciled, p's update was seen.
    told(&api, "barrier", "").await;
    log_where(&api, "barrier", "the barrier's add", count_is(1)).await;
    assert_eq!(log_where(&api, "p", "p's log", |_| true).await["count"], "1", "a data-only update is dropped");
    let labels = json!({"metadata": {"labels": {"extra": "1"}}});
    api.patch("p", &PatchParams::default(), &Patch::Merge(&labels)).await.unwrap();
    log_where(&api, "p", "a reconcile after a label change", count_is(2)).await;
    assert!(app.shut_down(Duration::from_secs(10)).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_0_1_and_a_0_2_component_load_and_reconcile_in_a_host_running_a_0_3_plugin() {
    let Some(cp) = ControlPlane::shared() else { return };
    let client = cp.admin_client().await;
    let ns = cp.namespace("contract-compat").await;
    let dir = tempfile::tempdir().unwrap();
    let mut app = contract_app(&client, dir.path(), &ns, "generation").await;
    for (name, built) in [("legacy", "fixture_legacy.wasm"), ("frozen", "fixture_frozen_0_2.wasm")] {
        let wasm = common::install_plugin(dir.path(), name, built, "grants: {write: [ConfigMap]}\n");
        let file =
            PluginFile { name: name.into(), wasm: Some(wasm), config: Some(dir.path().join(format!("{name}.yaml"))) };
        app.add_plugin(&file).await.unwrap();
    }
    eventually("readiness with all three", CONVERGE, || async { app.readiness().is_ready().then_some(()) }).await;
    let api = Api::<ConfigMap>::namespaced(client.clone(), &ns);

    config_map(&api, "old", json!({"kubewasm.test/legacy": "yes"}), json!({})).await;
    config_map(&api, "legacy-fail", json!({"kubewasm.test/legacy": "yes"}), json!({})).await;
    config_map(&api, "v0-2", json!({"kubewasm.test/v0-2": "yes"}), json!({})).await;
    config_map(&api, "v0-2-fail", json!({"kubewasm.test/v0-2": "yes"}), json!({})).await;
    told(&api, "new", "").await;
    eventually("the 0.1 plugin's patch", CONVERGE, || async {
        let cm = api.get("old").await.unwrap();
        cm.metadata.annotations?.get("kubewasm.test/legacy-seen").cloned()
    })
    .await;
    eventually("the 0.2 plugin's patch", CONVERGE, || async {
        let cm = api.get("v0-2").await.unwrap();
        cm.metadata.annotations?.get("kubewasm.test/v0-2-seen").cloned()
    })
    .await;
    log_where(&api, "new", "the 0.3 plugin's reconcile beside them", count_is(1)).await;
    // 0.1's string error is retried with backoff, as before 0.2; 0.2's terminal error is not.
    eventually("the 0.1 error retried", CONVERGE, || async {
        let text = metrics(&app);
        metric_value(&text, "controller_runtime_reconcile_errors_total", &[("controller", "legacy")])
            .filter(|n| *n >= 2.0)
    })
    .await;
    eventually("the 0.2 terminal error counted", CONVERGE, || async {
        let text = metrics(&app);
        metric_value(&text, "controller_runtime_terminal_reconcile_errors_total", &[("controller", "frozen")])
            .filter(|n| *n >= 1.0)
    })
    .await;
    assert!(app.shut_down(Duration::from_secs(10)).await);
}
