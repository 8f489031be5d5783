//! The dry-run canary against a real kube-apiserver + etcd: a WasmPlugin serving
//! namespace-defaults with a candidate of other settings reports the difference (metric,
//! status sample, Event) while the candidate writes nothing; promoting it makes it serve; an
//! identical candidate counts as the same; a candidate that does not load is reported in the
//! status with the serving version untouched; dropping the canary stops it.

use crate::common;

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, ResourceQuota};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kubewasm_host::hotload::WasmPlugin;
use kubewasm_host::hotload::wasmplugin::CanaryStatus;
use kubewasm_testenv::ControlPlane;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use common::{eventually, metric_value, plugin_wasm};

const CONVERGE: Duration = Duration::from_secs(120);

fn canary(wp: &WasmPlugin) -> Option<&CanaryStatus> {
    wp.status.as_ref()?.canary.as_ref()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_canary_reports_differences_writes_nothing_and_is_promoted_compared_and_dropped() {
    let Some(cp) = ControlPlane::shared() else { return };
    let client = cp.admin_client().await;
    common::examples::install_wasm_plugin_crd(&client).await;
    let ns = cp.namespace("canary").await;
    let modules = cp.namespace("canary-modules").await;
    let entries: [(&str, &[u8]); 2] =
        [("plugin.wasm", &plugin_wasm("namespace_defaults.wasm")), ("garbage.wasm", b"definitely not a component")];
    common::examples::put_module_config_map(&client, &modules, "nsdef-module", &entries).await;

    let app = common::app(&client);
    let stop = CancellationToken::new();
    let source = tokio::spawn(app.wasm_plugin_source(&modules).selector(&format!("test={ns}")).run(stop.clone()));

    let name = format!("nsdef-{ns}");
    let plugins: Api<WasmPlugin> = Api::all(client.clone());
    // Confined to the test's namespace: the plugin reconciles that one Namespace only.
    let apply = |settings: Value, canary: Option<Value>| {
        let mut spec = json!({
            "module": { "configMap": { "name": "nsdef-module", "key": "plugin.wasm" } },
            "grants": common::approved("namespace_defaults.wasm", json!({ "namespaces": { "names": [ns] } })),
            "settings": settings,
        });
        if let Some(canary) = canary {
            spec["canary"] = canary;
        }
        let body = json!({
            "apiVersion": "kubewasm.dev/v1alpha1", "kind": "WasmPlugin",
            "metadata": { "name": name, "labels": { "test": ns } },
            "spec": spec,
        });
        let (plugins, name) = (plugins.clone(), name.clone());
        async move { plugins.patch(&name, &PatchParams::apply("kubewasm-test"), &Patch::Apply(&body)).await.unwrap() }
    };
    let status_says = |what: &'static str, check: Box<dyn Fn(&WasmPlugin) -> bool + Send + Sync>| {
        let (plugins, name) = (plugins.clone(), name.clone());
        async move { eventually(what, CONVERGE, || async { plugins.get(&name).await.ok().filter(|wp| check(wp)) }).await }
    };
    let quotas: Api<ResourceQuota> = Api::namespaced(client.clone(), &ns);
    let metric = |result: &str| {
        let text = prometheus::TextEncoder::new().encode_to_string(&app.registry().gather()).unwrap();
        metric_value(&text, "kubewasm_canary_reconciles_total", &[("plugin", &name), ("result", result)]).unwrap_or(0.0)
    };

    // A candidate with another quota name: every reconcile differs.
    apply(json!({ "quotaName": "serving-quota" }), Some(json!({ "settings": { "quotaName": "canary-quota" } }))).await;
    let wp = status_says(
        "status.canary holds a difference on the namespace",
        Box::new(|wp| canary(wp).is_some_and(|c| c.differ >= 1 && c.last_difference.is_some())),
    )
    .await;
    let difference = canary(&wp).unwrap().last_difference.clone().unwrap();
    assert_eq!((difference.key.as_str(), difference.result.as_str()), (ns.as_str(), "differ"));
    assert!(
        difference.diff.contains("--- serving")
            && difference.diff.contains("-      name: serving-quota")
            && difference.diff.contains("+      name: canary-quota"),
        "{}",
        difference.diff
    );
    assert_eq!(canary(&wp).unwrap().same, 0);
    assert!(metric("differ") >= 1.0, "the metric counts differing reconciles");
    assert_eq!(metric("same"), 0.0);
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    let event = eventually("a CanaryDiffers Event on the WasmPlugin", CONVERGE, || async {
        let list = events.list(&ListParams::default()).await.ok()?;
        list.items.into_iter().find(|e| {
            e.reason.as_deref() == Some("CanaryDiffers")
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name.as_str())
        })
    })
    .await;
    assert!(event.note.unwrap_or_default().contains("canary-quota"));
    // The serving version wrote its quota; the candidate, having reconciled, wrote nothing.
    eventually("the serving quota", CONVERGE, || async { quotas.get_opt("serving-quota").await.ok()? }).await;
    assert!(quotas.get_opt("canary-quota").await.unwrap().is_none(), "the candidate's write reached the cluster");
    // Nor its Event: the serving version's DefaultsApplied (on the Namespace, so in `default`)
    // arrived, the candidate's never does.
    let notes = || async {
        let list = events.list(&ListParams::default()).await.unwrap();
        let about_ns =
            list.items.into_iter().filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_ref()) == Some(&ns));
        about_ns.filter_map(|e| e.note).collect::<Vec<_>>()
    };
    eventually("the serving version's DefaultsApplied Event", CONVERGE, || async {
        notes().await.iter().any(|n| n.contains("serving-quota")).then_some(())
    })
    .await;
    assert!(!notes().await.iter().any(|n| n.contains("canary-quota")), "the candidate's Event reached the cluster");

    // A candidate that does not load: the reason in status.canary, the serving version untouched.
    let garbage = json!({ "module": { "configMap": { "name": "nsdef-module", "key": "garbage.wasm" } } });
    apply(json!({ "quotaName": "serving-quota" }), Some(garbage)).await;
    let wp = status_says(
        "status.canary says the candidate did not load",
        Box::new(|wp| {
            canary(wp).and_then(|c| c.last_error.as_deref()).is_some_and(|e| e.contains("not a WebAssembly binary"))
        }),
    )
    .await;
    assert_eq!(wp.status.as_ref().unwrap().revision, Some(1), "the serving version is untouched");
    assert!(wp.status.as_ref().unwrap().conditions.iter().any(|c| c.type_ == "Ready" && c.status == "True"));

    // Promote: the candidate's settings serve, as revision 2, and the canary is gone.
    apply(json!({ "quotaName": "canary-quota" }), None).await;
    status_says(
        "revision 2 serving without a canary",
        Box::new(|wp| wp.status.as_ref().is_some_and(|s| s.revision == Some(2) && s.canary.is_none())),
    )
    .await;
    eventually("the promoted version's quota", CONVERGE, || async { quotas.get_opt("canary-quota").await.ok()? }).await;
    assert!(app.plugins().canary(&name).await.is_none(), "no canary runs after promotion");

    // An identical candidate: every reconcile is the same.
    apply(json!({ "quotaName": "canary-quota" }), Some(json!({}))).await;
    let wp = status_says(
        "status.canary counts the same reconcile",
        Box::new(|wp| canary(wp).is_some_and(|c| c.same >= 1 && c.sha256.is_some())),
    )
    .await;
    let status = canary(&wp).unwrap();
    assert_eq!((status.differ, status.failed, status.last_difference.as_ref()), (0, 0, None), "{status:?}");
    assert!(metric("same") >= 1.0);

    // Drop: removing the field stops the canary and clears its status.
    apply(json!({ "quotaName": "canary-quota" }), None).await;
    status_says("no canary in the status", Box::new(|wp| wp.status.as_ref().is_some_and(|s| s.canary.is_none()))).await;
    eventually("the canary stopped", CONVERGE, || async { app.plugins().canary(&name).await.is_none().then_some(()) })
        .await;

    stop.cancel();
    source.await.unwrap();
    assert!(app.shut_down(Duration::from_secs(10)).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_files_canary_that_traps_is_counted_as_failed_and_the_serving_version_goes_on() {
    let Some(cp) = ControlPlane::shared() else { return };
    let client = cp.admin_client().await;
    let ns = cp.namespace("canary-dir").await;
    let label = format!("kubewasm.test/canary-dir={ns}");
    let dir = tempfile::tempdir().unwrap();
    // The candidate is a hidden file, so the directory does not load it as a plugin of its own.
    std::fs::copy(common::plugin_dir().join("fixture_trapper.wasm"), dir.path().join(".stamper.canary.wasm")).unwrap();
    let config = format!(
        "grants: {{write: [ConfigMap]}}\nsettings: {{version: v1, selector: \"{label}\"}}\ncanary: {{wasm: .stamper.canary.wasm}}\n"
    );
    common::install_plugin(dir.path(), "stamper", "fixture_stamper.wasm", &config);

    let app = common::app(&client);
    let mut source = app.directory_source(dir.path());
    source.sync().await.unwrap();
    eventually("the canary runs", CONVERGE, || async { app.plugins().canary("stamper").await }).await;

    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let obj: ConfigMap =
        serde_json::from_value(json!({ "metadata": { "name": "obj", "labels": { "kubewasm.test/canary-dir": ns } } }))
            .unwrap();
    cms.create(&Default::default(), &obj).await.unwrap();
    let (_, report) = eventually("the candidate's trap counted as failed", CONVERGE, || async {
        app.plugins().canary("stamper").await.filter(|(_, r)| r.failed >= 1)
    })
    .await;
    let difference = report.last_difference.unwrap();
    assert_eq!((difference.key, difference.result), (format!("{ns}/obj"), "failed"));
    assert!(difference.detail.starts_with("plugin trapped"), "{}", difference.detail);
    eventually("the serving version stamped obj all the same", CONVERGE, || async {
        let cm = cms.get("obj").await.ok()?;
        (cm.metadata.annotations?.get("kubewasm.test/version")? == "v1").then_some(())
    })
    .await;
    let text = prometheus::TextEncoder::new().encode_to_string(&app.registry().gather()).unwrap();
    let failed = [("plugin", "stamper"), ("result", "failed")];
    assert!(metric_value(&text, "kubewasm_canary_reconciles_total", &failed).unwrap_or(0.0) >= 1.0, "{text}");

    // Dropping it from the config file stops it.
    std::fs::write(dir.path().join("stamper.yaml"), config.replace("canary: {wasm: .stamper.canary.wasm}\n", ""))
        .unwrap();
    source.sync().await.unwrap();
    assert!(app.plugins().canary("stamper").await.is_none(), "the canary stopped");
    assert!(app.plugins().serving("stamper").await.is_some(), "the serving version goes on");
    assert!(app.shut_down(Duration::from_secs(10)).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_file_added_by_the_app_runs_its_canary_as_the_directory_source_does() {
    let Some(cp) = ControlPlane::shared() else { return };
    let client = cp.admin_client().await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(common::plugin_dir().join("fixture_trapper.wasm"), dir.path().join(".stamper.canary.wasm")).unwrap();
    let config = "grants: {write: [ConfigMap]}\nsettings: {version: v1, selector: \"kubewasm.test/none=none\"}\n\
                  canary: {wasm: .stamper.canary.wasm}\n";
    common::install_plugin(dir.path(), "stamper", "fixture_stamper.wasm", config);
    let file = kubewasm_host::app::plugin_files(dir.path()).unwrap().into_iter().find(|f| f.name == "stamper").unwrap();

    let mut app = common::app(&client);
    app.add_plugin(&file).await.unwrap();
    assert!(app.plugins().serving("stamper").await.is_some(), "the plugin serves");
    let (sha256, _) = app.plugins().canary("stamper").await.expect("the canary its config names runs");
    let trapper = std::fs::read(dir.path().join(".stamper.canary.wasm")).unwrap();
    assert_eq!(sha256, kubewasm_host::plugin::sha256_hex(&trapper), "the candidate is the canary file");
    assert!(app.shut_down(Duration::from_secs(10)).await);
}
