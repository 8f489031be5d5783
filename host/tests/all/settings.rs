//! Settings validated at load against a real kube-apiserver + etcd: a WasmPlugin whose settings
//! break its `settingsSchema` is rejected before any swap, with the reason in its status and
//! `kubewasm_plugin_rejected_versions_total`, while the version before keeps serving.

use crate::common;

use std::time::Duration;

use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kubewasm_host::hotload::WasmPlugin;
use kubewasm_testenv::ControlPlane;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use common::{eventually, metric_value, plugin_wasm};

const CONVERGE: Duration = Duration::from_secs(120);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wasm_plugin_whose_settings_break_its_schema_is_rejected_and_the_old_version_serves() {
    let Some(cp) = ControlPlane::shared() else { return };
    let client = cp.admin_client().await;
    common::examples::install_wasm_plugin_crd(&client).await;
    let ns = cp.namespace("settings").await;
    let modules = cp.namespace("settings-modules").await;
    let stamper = plugin_wasm("fixture_stamper.wasm");
    common::examples::put_module_config_map(&client, &modules, "stamper-module", &[("plugin.wasm", &stamper)]).await;

    let app = common::app(&client);
    let stop = CancellationToken::new();
    let source = tokio::spawn(app.wasm_plugin_source(&modules).selector(&format!("test={ns}")).run(stop.clone()));
    let name = format!("stamper-{ns}");
    let plugins: Api<WasmPlugin> = Api::all(client.clone());
    let apply = |version: serde_json::Value| {
        let body = json!({
            "apiVersion": "kubewasm.dev/v1alpha1", "kind": "WasmPlugin",
            "metadata": { "name": name, "labels": { "test": ns } },
            "spec": {
                "module": { "configMap": { "name": "stamper-module", "key": "plugin.wasm" } },
                "grants": common::approved("fixture_stamper.wasm", json!({ "write": ["ConfigMap"] })),
                "settings": { "version": version, "selector": format!("kubewasm.test/settings={ns}") },
                "settingsSchema": {
                    "type": "object",
                    "properties": { "version": { "type": "string", "pattern": "^v[0-9]+$" }, "selector": { "type": "string" } },
                    "required": ["version"],
                    "additionalProperties": false,
                },
            },
        });
        let (plugins, name) = (plugins.clone(), name.clone());
        async move { plugins.patch(&name, &PatchParams::apply("kubewasm-test"), &Patch::Apply(&body)).await.unwrap() }
    };
    let condition = |wp: &WasmPlugin, type_: &str| {
        wp.status.as_ref().and_then(|s| s.conditions.iter().find(|c| c.type_ == type_).cloned())
    };

    apply(json!("v1")).await;
    eventually("revision 1 serving with its caches synced", CONVERGE, || async {
        let wp = plugins.get(&name).await.ok()?;
        let ready = condition(&wp, "Ready").is_some_and(|c| c.status == "True");
        (ready && wp.status.as_ref().and_then(|s| s.revision) == Some(1)).then_some(())
    })
    .await;

    apply(json!("one")).await;
    let wp = eventually("Degraded: InvalidSettings", CONVERGE, || async {
        plugins.get(&name).await.ok().filter(|wp| condition(wp, "Degraded").is_some_and(|c| c.status == "True"))
    })
    .await;
    let degraded = condition(&wp, "Degraded").unwrap();
    assert_eq!(degraded.reason, "InvalidSettings", "{degraded:?}");
    assert!(
        degraded.message.contains("/version")
            && degraded.message.contains("^v[0-9]+$")
            && degraded.message.contains("settingsSchema"),
        "{degraded:?}"
    );
    assert_eq!(wp.status.as_ref().unwrap().revision, Some(1), "the version before keeps serving");
    assert_eq!(app.plugins().serving(&name).await.unwrap().revision, 1);
    let metrics = prometheus::TextEncoder::new().encode_to_string(&app.registry().gather()).unwrap();
    let labels = [("plugin", name.as_str()), ("reason", "InvalidSettings")];
    assert_eq!(metric_value(&metrics, "kubewasm_plugin_rejected_versions_total", &labels), Some(1.0), "{metrics}");

    plugins.delete(&name, &DeleteParams::default()).await.unwrap();
    eventually("the plugin unloaded", CONVERGE, || async {
        app.plugins().serving(&name).await.is_none().then_some(())
    })
    .await;
    stop.cancel();
    source.await.unwrap();
    assert!(app.shut_down(Duration::from_secs(10)).await);
}
