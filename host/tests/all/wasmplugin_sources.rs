//! WasmPlugins given as source (`spec.engine`) in a ConfigMap, against a real kube-apiserver +
//! etcd: the plugin serves and a broken edit leaves it serving, and a source of several files
//! imports its entry.

use crate::common;
use crate::wasmplugin::condition;

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kubewasm_host::app::App;
use kubewasm_host::hotload::WasmPlugin;
use kubewasm_testenv::ControlPlane;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use common::eventually;

const CONVERGE: Duration = Duration::from_secs(120);

/// Writes ConfigMap `name` in `ns` with `data`: the source files of a plugin, as `kubectl create
/// configmap NAME --from-file=…` makes them.
async fn put_source(client: &kube::Client, ns: &str, name: &str, data: &[(&str, &str)]) {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let data: BTreeMap<&str, &str> = data.iter().copied().collect();
    let body = json!({ "apiVersion": "v1", "kind": "ConfigMap", "metadata": { "name": name }, "data": data });
    api.patch(name, &PatchParams::apply("kubewasm-test").force(), &Patch::Apply(&body)).await.unwrap();
}

/// A host serving the WasmPlugins of ConfigMaps in `modules`, and WasmPlugin `defaults-<ns>`:
/// namespace-defaults' Python source from ConfigMap `config_map` (importing `entry`, else its one
/// file), confined to `ns` by its grants.
struct ServedSource {
    _app: App,
    shutdown: CancellationToken,
    source: tokio::task::JoinHandle<()>,
    name: String,
    plugins: Api<WasmPlugin>,
}

async fn serve_source(
    client: &kube::Client,
    ns: &str,
    modules: &str,
    config_map: &str,
    entry: Option<&str>,
) -> ServedSource {
    let app = common::app(client);
    let stop = CancellationToken::new();
    let source = tokio::spawn(app.wasm_plugin_source(modules).selector(&format!("test={ns}")).run(stop.clone()));
    let name = format!("defaults-{ns}");
    let plugins: Api<WasmPlugin> = Api::all(client.clone());
    let grants = common::approved("namespace_defaults_py.wasm", json!({ "namespaces": { "names": [ns] } }));
    let mut spec = json!({
        "engine": "python@0.3",
        "module": { "configMap": { "name": config_map } },
        "grants": grants,
        "limits": { "deadlineMs": 5000, "memoryBytes": 134217728 },
    });
    if let Some(entry) = entry {
        spec["entry"] = json!(entry);
    }
    let body = json!({
        "apiVersion": "kubewasm.dev/v1alpha1", "kind": "WasmPlugin",
        "metadata": { "name": name, "labels": { "test": ns } },
        "spec": spec,
    });
    plugins.patch(&name, &PatchParams::apply("kubewasm-test"), &Patch::Apply(&body)).await.unwrap();
    ServedSource { _app: app, shutdown: stop, source, name, plugins }
}

impl ServedSource {
    /// Deletes the WasmPlugin and stops the source.
    async fn stop(self) {
        self.plugins.delete(&self.name, &DeleteParams::default()).await.unwrap();
        self.shutdown.cancel();
        self.source.await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wasm_plugin_given_as_source_in_a_config_map_serves_and_a_broken_edit_leaves_it_serving() {
    let Some(cp) = ControlPlane::shared() else { return };
    let client = cp.admin_client().await;
    common::examples::install_wasm_plugin_crd(&client).await;
    // The Namespace namespace-defaults reconciles, confined to it by its grants.
    let ns = cp.namespace("wp-src").await;
    let modules = cp.namespace("wp-src-modules").await;
    let text = common::plugin_source("python/namespace-defaults/namespace_defaults.py");
    put_source(&client, &modules, "defaults-source", &[("namespace_defaults.py", &text)]).await;

    let served = serve_source(&client, &ns, &modules, "defaults-source", None).await;
    let (name, plugins) = (served.name.clone(), served.plugins.clone());
    let quotas: Api<k8s_openapi::api::core::v1::ResourceQuota> = Api::namespaced(client.clone(), &ns);
    let made = |not: Option<String>| {
        let quotas = quotas.clone();
        async move {
            eventually("the default quota namespace-defaults makes", CONVERGE, || async {
                quotas.get_opt("default-quota").await.unwrap().filter(|q| q.metadata.uid != not)
            })
            .await
        }
    };
    let quota = made(None).await;
    let serving = plugins.get(&name).await.unwrap().status.unwrap();
    assert_eq!(serving.revision, Some(1));

    // An edit of the ConfigMap whose last line is broken: Degraded at that file and line, and
    // revision 1 keeps serving.
    let broken = format!("{}\ndef broken(:\n", text.trim_end());
    put_source(&client, &modules, "defaults-source", &[("namespace_defaults.py", &broken)]).await;
    let at = format!("namespace_defaults.py:{}", broken.lines().count());
    let degraded = eventually("Degraded at the broken line", CONVERGE, || async {
        let wp = plugins.get(&name).await.ok()?;
        condition(&wp, "Degraded").filter(|c| c.status == "True" && c.reason == "LoadFailed").cloned()
    })
    .await;
    assert!(degraded.message.contains(&at) && degraded.message.contains("SyntaxError"), "{}", degraded.message);
    let wp = plugins.get(&name).await.unwrap();
    assert_eq!(condition(&wp, "Ready").unwrap().status, "True", "the previous version still serves");
    assert_eq!(wp.status.unwrap().loaded_sha256, serving.loaded_sha256);
    quotas.delete("default-quota", &DeleteParams::default()).await.unwrap();
    made(quota.metadata.uid).await;

    // The API server refuses, on its own, a source from anywhere but a ConfigMap, and a
    // component in a ConfigMap without its key.
    let sha = "0".repeat(64);
    for (spec, says) in [
        (
            json!({ "engine": "python@0.3", "module": { "url": { "url": "https://x/p.py", "sha256": sha } } }),
            "comes from a ConfigMap",
        ),
        (json!({ "module": { "configMap": { "name": "defaults-source" } } }), "set module.configMap.key"),
        (json!({ "engine": "python", "module": { "configMap": { "name": "defaults-source" } } }), "should match"),
    ] {
        let body = json!({ "apiVersion": "kubewasm.dev/v1alpha1", "kind": "WasmPlugin", "metadata": { "name": "refused" }, "spec": spec });
        // Sent as it is: the host's types would refuse the last one before the API server does.
        let refused: kube::api::DynamicObject = serde_json::from_value(body).unwrap();
        let resource = kube::api::ApiResource::erase::<WasmPlugin>(&());
        let raw: Api<kube::api::DynamicObject> = Api::all_with(client.clone(), &resource);
        let err = raw.create(&PostParams { dry_run: true, ..Default::default() }, &refused).await.unwrap_err();
        assert!(err.to_string().contains(says), "{spec}: {err}");
    }
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wasm_plugin_given_as_source_of_several_files_imports_its_entry_and_the_other_files_as_modules() {
    let Some(cp) = ControlPlane::shared() else { return };
    let client = cp.admin_client().await;
    common::examples::install_wasm_plugin_crd(&client).await;
    let ns = cp.namespace("wp-files").await;
    let modules = cp.namespace("wp-files-modules").await;
    // namespace-defaults with its children's label value in a module of its own.
    let text = common::plugin_source("python/namespace-defaults/namespace_defaults.py");
    let main = text
        .replace("\"kubewasm-namespace-defaults\"}", "MANAGED_BY}")
        .replace("\nNAMESPACE, QUOTA =", "\nfrom labels import MANAGED_BY\nNAMESPACE, QUOTA =");
    assert_eq!(main.matches("MANAGED_BY").count(), 2, "the source changed: {text}");
    let labels = "MANAGED_BY = 'namespace-defaults-of-two-files'\n";
    put_source(&client, &modules, "defaults-files", &[("namespace_defaults.py", &main), ("labels.py", labels)]).await;

    let served = serve_source(&client, &ns, &modules, "defaults-files", Some("namespace_defaults")).await;
    let quotas: Api<k8s_openapi::api::core::v1::ResourceQuota> = Api::namespaced(client.clone(), &ns);
    let quota = eventually("the default quota namespace-defaults makes", CONVERGE, || async {
        quotas.get_opt("default-quota").await.unwrap()
    })
    .await;
    let managed_by = quota.metadata.labels.unwrap_or_default().remove("app.kubernetes.io/managed-by");
    assert_eq!(managed_by.as_deref(), Some("namespace-defaults-of-two-files"), "the second file's value");
    served.stop().await;
}
