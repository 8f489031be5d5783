//! WasmPlugins given as source (`spec.engine`) in a ConfigMap, against a real kube-apiserver +
//! etcd, in Python and JavaScript: the plugin serves and a broken edit leaves it serving, and a
//! canary given as source runs on the same engine (a broken candidate is reported, its fixed
//! ConfigMap is picked up, its difference reported with nothing written, and promoting it makes
//! it serve). In Python, a source of several files imports its entry.

use crate::common;
use crate::wasmplugin::condition;

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, ResourceQuota};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kubewasm_host::app::App;
use kubewasm_host::hotload::WasmPlugin;
use kubewasm_host::hotload::wasmplugin::CanaryStatus;
use kubewasm_testenv::ControlPlane;
use rstest::rstest;
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

/// namespace-defaults given as source in one language.
struct Language {
    /// `spec.engine`.
    engine: &'static str,
    /// Its file, as the ConfigMap's key.
    file: &'static str,
    /// Its path under `plugins/`.
    path: &'static str,
    /// Its packaged build, whose grants the test approves.
    built: &'static str,
    /// A line that does not parse.
    broken: &'static str,
    /// Its text of the default quota's 50 pods.
    pods: &'static str,
}

const PYTHON: Language = Language {
    engine: "python@0.3",
    file: "namespace_defaults.py",
    path: "python/namespace-defaults/namespace_defaults.py",
    built: "namespace_defaults_py.wasm",
    broken: "def broken(:",
    pods: r#""pods": "50""#,
};

const JAVASCRIPT: Language = Language {
    engine: "js@0.3",
    file: "namespace-defaults.js",
    path: "js/namespace-defaults/namespace-defaults.js",
    built: "namespace_defaults_js.wasm",
    broken: "const broken = (;",
    pods: "pods: '50'",
};

/// A host serving the WasmPlugins of ConfigMaps in `modules`, and WasmPlugin `defaults-<ns>`:
/// namespace-defaults' source in `language` from ConfigMap `config_map` (importing `entry`, else
/// its one file), confined to `ns` by its grants.
struct ServedSource {
    _app: App,
    shutdown: CancellationToken,
    source: tokio::task::JoinHandle<()>,
    name: String,
    plugins: Api<WasmPlugin>,
}

async fn serve_source(
    language: &Language,
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
    let grants = common::approved(language.built, json!({ "namespaces": { "names": [ns] } }));
    let mut spec = json!({
        "engine": language.engine,
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

#[rstest]
#[case::python(&PYTHON)]
#[case::javascript(&JAVASCRIPT)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wasm_plugin_given_as_source_in_a_config_map_serves_and_a_broken_edit_leaves_it_serving(
    #[case] language: &Language,
) {
    let Some(cp) = ControlPlane::shared() else { return };
    let client = cp.admin_client().await;
    common::examples::install_wasm_plugin_crd(&client).await;
    // The Namespace namespace-defaults reconciles, confined to it by its grants.
    let ns = cp.namespace("wp-src").await;
    let modules = cp.namespace("wp-src-modules").await;
    let text = common::plugin_source(language.path);
    put_source(&client, &modules, "defaults-source", &[(language.file, &text)]).await;

    let served = serve_source(language, &client, &ns, &modules, "defaults-source", None).await;
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
    let broken = format!("{}\n{}\n", text.trim_end(), language.broken);
    put_source(&client, &modules, "defaults-source", &[(language.file, &broken)]).await;
    let at = format!("{}:{}", language.file, broken.lines().count());
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

    let served = serve_source(&PYTHON, &client, &ns, &modules, "defaults-files", Some("namespace_defaults")).await;
    let quotas: Api<k8s_openapi::api::core::v1::ResourceQuota> = Api::namespaced(client.clone(), &ns);
    let quota = eventually("the default quota namespace-defaults makes", CONVERGE, || async {
        quotas.get_opt("default-quota").await.unwrap()
    })
    .await;
    let managed_by = quota.metadata.labels.unwrap_or_default().remove("app.kubernetes.io/managed-by");
    assert_eq!(managed_by.as_deref(), Some("namespace-defaults-of-two-files"), "the second file's value");
    served.stop().await;
}

/// The canary of a WasmPlugin given as source is source too, on the same engine, from a
/// ConfigMap of its own; editing that ConfigMap reloads the candidate even while it is rejected.
#[rstest]
#[case::python(&PYTHON)]
#[case::javascript(&JAVASCRIPT)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_canary_given_as_source_is_reported_broken_reloaded_once_fixed_compared_and_promoted(
    #[case] language: &Language,
) {
    let Some(cp) = ControlPlane::shared() else { return };
    let client = cp.admin_client().await;
    common::examples::install_wasm_plugin_crd(&client).await;
    let ns = cp.namespace("wp-src-canary").await;
    let modules = cp.namespace("wp-src-canary-modules").await;
    let text = common::plugin_source(language.path);
    let candidate = text.replace(language.pods, &language.pods.replace("50", "60"));
    assert_ne!(candidate, text, "the source changed: {text}");
    put_source(&client, &modules, "defaults-source", &[(language.file, &text)]).await;

    let served = serve_source(language, &client, &ns, &modules, "defaults-source", None).await;
    let (name, plugins) = (served.name.clone(), served.plugins.clone());
    let quotas: Api<ResourceQuota> = Api::namespaced(client.clone(), &ns);
    let pods = |pods: &'static str| {
        let quotas = quotas.clone();
        async move {
            eventually(&format!("the default quota allows {pods} pods"), CONVERGE, || async {
                let quota = quotas.get_opt("default-quota").await.unwrap()?;
                (quota.spec?.hard?.get("pods")?.0 == pods).then_some(())
            })
            .await
        }
    };
    pods("50").await;
    // Ready once its caches synced: no poll of the plugin is pending from here on, so only the
    // changes below queue it again.
    eventually("Ready, its caches synced", CONVERGE, || async {
        let wp = plugins.get(&name).await.ok()?;
        (condition(&wp, "Ready")?.status == "True").then_some(())
    })
    .await;
    let canary_says = |what: &'static str, check: fn(&CanaryStatus) -> bool| {
        let (plugins, name) = (plugins.clone(), name.clone());
        async move {
            eventually(what, CONVERGE, || async {
                let wp = plugins.get(&name).await.ok()?;
                wp.status.as_ref()?.canary.as_ref().filter(|c| check(c)).cloned()
            })
            .await
        }
    };

    // A candidate whose source is broken: the reason in status.canary, at its file and line.
    let broken = format!("{}\n{}\n", candidate.trim_end(), language.broken);
    put_source(&client, &modules, "defaults-candidate", &[(language.file, &broken)]).await;
    let canary = json!({ "spec": { "canary": { "module": { "configMap": { "name": "defaults-candidate" } } } } });
    plugins.patch(&name, &PatchParams::default(), &Patch::Merge(&canary)).await.unwrap();
    let status = canary_says("status.canary says the candidate did not load", |c| {
        c.last_error.as_deref().is_some_and(|e| e.contains("SyntaxError"))
    })
    .await;
    let at = format!("{}:{}", language.file, broken.lines().count());
    assert!(status.last_error.as_deref().unwrap().contains(&at), "{status:?}");
    let wp = plugins.get(&name).await.unwrap();
    assert_eq!(wp.status.as_ref().unwrap().revision, Some(1), "the serving version is untouched");
    assert_eq!(condition(&wp, "Ready").unwrap().status, "True");

    // Fixed in its ConfigMap alone, the WasmPlugin unchanged: the candidate loads.
    put_source(&client, &modules, "defaults-candidate", &[(language.file, &candidate)]).await;
    canary_says("the fixed candidate runs", |c| c.sha256.is_some() && c.last_error.is_none()).await;
    // A change to the Namespace: the serving version reconciles it, then the candidate.
    let touch = json!({ "metadata": { "labels": { "kubewasm.test/touched": "yes" } } });
    Api::<Namespace>::all(client.clone()).patch(&ns, &PatchParams::default(), &Patch::Merge(&touch)).await.unwrap();
    let status = canary_says("status.canary holds a difference on the Namespace", |c| {
        c.differ >= 1 && c.last_difference.is_some()
    })
    .await;
    let difference = status.last_difference.unwrap();
    assert_eq!((difference.key.as_str(), difference.result.as_str()), (ns.as_str(), "differ"));
    let changed = |sign: char, pods: &str| {
        difference.diff.lines().any(|l| l.starts_with(sign) && l.contains("pods") && l.contains(pods))
    };
    assert!(changed('-', "50") && changed('+', "60"), "{}", difference.diff);
    // The candidate reconciled, and wrote nothing: the quota is still the serving version's.
    let quota = quotas.get("default-quota").await.unwrap();
    assert_eq!(quota.spec.unwrap().hard.unwrap()["pods"].0, "50", "the candidate's write reached the cluster");

    // Promoted: the candidate's ConfigMap is the module, and its quota is applied.
    let promote = json!({ "spec": { "module": { "configMap": { "name": "defaults-candidate" } }, "canary": null } });
    plugins.patch(&name, &PatchParams::default(), &Patch::Merge(&promote)).await.unwrap();
    eventually("revision 2 serving without a canary", CONVERGE, || async {
        let status = plugins.get(&name).await.ok()?.status?;
        (status.revision == Some(2) && status.canary.is_none()).then_some(())
    })
    .await;
    pods("60").await;
    served.stop().await;
}
