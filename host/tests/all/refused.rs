//! A WasmPlugin whose plugin the API server refuses at run time says so in its conditions
//! (issue 49, class 7): reviewed at load its identity had every right, and then lost one.

use crate::common;

use std::time::Duration;

use k8s_openapi::api::authorization::v1::SubjectAccessReview;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kubewasm_host::app::App;
use kubewasm_host::hotload::{Options, WasmPlugin};
use kubewasm_host::rbac::{Identity, RBAC_LABEL};
use kubewasm_testenv::ControlPlane;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use common::{eventually, plugin_wasm};

const CONVERGE: Duration = Duration::from_secs(120);

/// `wp`'s condition `type_` as (status, reason, message).
fn condition(wp: &WasmPlugin, type_: &str) -> Option<(String, String, String)> {
    let c = wp.status.as_ref()?.conditions.iter().find(|c| c.type_ == type_)?;
    Some((c.status.clone(), c.reason.clone(), c.message.clone()))
}

/// Whether the API server's authorizer lets `user`, a ServiceAccount of `kubewasm-system`, patch
/// ConfigMaps in `namespace` (a SubjectAccessReview sent as the admin).
async fn may_patch_config_maps(client: &kube::Client, user: &str, namespace: &str) -> bool {
    let review: SubjectAccessReview = serde_json::from_value(json!({
        "spec": {
            "user": user,
            "groups": ["system:serviceaccounts", "system:serviceaccounts:kubewasm-system", "system:authenticated"],
            "resourceAttributes": { "verb": "patch", "resource": "configmaps", "namespace": namespace },
        },
    }))
    .unwrap();
    let answer = Api::<SubjectAccessReview>::all(client.clone()).create(&PostParams::default(), &review).await.unwrap();
    answer.status.is_some_and(|s| s.allowed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_the_api_server_refuses_at_run_time_shows_in_the_wasm_plugins_conditions() {
    let Some(cp) = ControlPlane::shared() else { return };
    let client = cp.admin_client().await;
    common::examples::install_wasm_plugin_crd(&client).await;
    let ns = cp.namespace("refused").await;
    let modules = cp.namespace("refused-modules").await;
    let label = format!("kubewasm.test/refused={ns}");
    let wasm = plugin_wasm("fixture_stamper.wasm");
    common::examples::put_module_config_map(&client, &modules, "stamper-module", &[("plugin.wasm", &wasm)]).await;
    let identity = Identity { namespace: "kubewasm-system".into(), host_service_account: "kubewasm".into() };
    let options = Options { identity: Some(identity.clone()), provision_rbac: true, ..Options::default() };
    let app = App::with_options(client.clone(), Some(&common::test_compile_cache()), None, options).unwrap();
    let stop = CancellationToken::new();
    let source = tokio::spawn(app.wasm_plugin_source(&modules).selector(&format!("test={ns}")).run(stop.clone()));

    let name = format!("refused-{ns}");
    let plugins: Api<WasmPlugin> = Api::all(client.clone());
    let body = json!({
        "apiVersion": "kubewasm.dev/v1alpha1", "kind": "WasmPlugin",
        "metadata": { "name": name, "labels": { "test": ns } },
        "spec": {
            "module": { "configMap": { "name": "stamper-module", "key": "plugin.wasm" } },
            "grants": common::approved("fixture_stamper.wasm", json!({ "write": ["ConfigMap"] })),
            "settings": { "version": "v1", "selector": label },
        },
    });
    plugins.patch(&name, &PatchParams::apply("kubewasm-test"), &Patch::Apply(&body)).await.unwrap();
    eventually("provisioned: Ready, RBACMissing False", CONVERGE, || async {
        let wp = plugins.get(&name).await.ok()?;
        let ready = condition(&wp, "Ready")?.0 == "True";
        (ready && condition(&wp, "RBACMissing")?.0 == "False").then_some(())
    })
    .await;

    // The operator (or drift) takes the plugin's cluster-wide rights away; nothing else changes.
    let bindings: Api<ClusterRoleBinding> = Api::all(client.clone());
    let of_plugin = ListParams::default().labels(&format!("{RBAC_LABEL}={name}"));
    bindings.delete_collection(&DeleteParams::default(), &of_plugin).await.unwrap();
    // The API server's authorizer learns of the deletion from its own watch; until it has, the
    // plugin's patch would still be allowed, and a stamped object is never patched again.
    let user = kubewasm_host::rbac::user(&identity, &name);
    eventually("the API server no longer lets the plugin patch ConfigMaps", CONVERGE, || async {
        (!may_patch_config_maps(&client, &user, &ns).await).then_some(())
    })
    .await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let object = json!({ "metadata": { "name": "obj", "labels": { "kubewasm.test/refused": ns } } });
    api.create(&PostParams::default(), &serde_json::from_value(object).unwrap()).await.unwrap();

    let (_, _, message) = eventually("RBACMissing True, as the API server refused it", CONVERGE, || async {
        let wp = plugins.get(&name).await.ok()?;
        condition(&wp, "RBACMissing").filter(|(status, reason, _)| status == "True" && reason == "APIServerForbidden")
    })
    .await;
    assert!(message.contains("the API server refused it") && message.contains("obj"), "{message}");
    let wp = plugins.get(&name).await.unwrap();
    assert_eq!(wp.status.unwrap().revision, Some(1), "the same version, reported again");
    stop.cancel();
    source.await.unwrap();
}

/// Class 6 of issue 49: a write of a name another plugin made shows in the WasmPlugin's
/// conditions, naming the holder and the handover, besides the `AccessDenied` Event.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_another_plugin_made_shows_in_the_wasm_plugins_conditions_with_its_holder() {
    use common::hostile::config_map_kind;
    let Some(cp) = ControlPlane::shared() else { return };
    let client = cp.admin_client().await;
    common::examples::install_wasm_plugin_crd(&client).await;
    let ns = cp.namespace("held").await;
    let modules = cp.namespace("held-modules").await;
    let wasm = plugin_wasm("fixture_hostile.wasm");
    common::examples::put_module_config_map(&client, &modules, "hostile-module", &[("plugin.wasm", &wasm)]).await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let trigger = json!({ "metadata": { "name": "trigger", "labels": { "kubewasm.test/held": ns } } });
    api.create(&PostParams::default(), &serde_json::from_value(trigger).unwrap()).await.unwrap();
    let child = json!({ "metadata": { "name": "child", "labels": { "kubewasm.dev/plugin": "held-other" } } });
    api.create(&PostParams::default(), &serde_json::from_value(child).unwrap()).await.unwrap();

    let app = App::with_options(client.clone(), Some(&common::test_compile_cache()), None, Options::default()).unwrap();
    let stop = CancellationToken::new();
    let source = tokio::spawn(app.wasm_plugin_source(&modules).selector(&format!("test={ns}")).run(stop.clone()));
    let name = format!("held-{ns}");
    let plugins: Api<WasmPlugin> = Api::all(client.clone());
    let settings = json!({
        "selector": format!("kubewasm.test/held={ns}"), "owns": [config_map_kind()],
        "onSelected": [{ "op": "merge-patch", "kind": config_map_kind(), "namespace": "$trigger",
                         "name": "child", "body": { "data": { "by": "me" } } }],
    });
    let body = json!({
        "apiVersion": "kubewasm.dev/v1alpha1", "kind": "WasmPlugin",
        "metadata": { "name": name, "labels": { "test": ns } },
        "spec": {
            "module": { "configMap": { "name": "hostile-module", "key": "plugin.wasm" } },
            "grants": common::approved("fixture_hostile.wasm", json!({ "own": ["ConfigMap"] })),
            "settings": settings,
        },
    });
    plugins.patch(&name, &PatchParams::apply("kubewasm-test"), &Patch::Apply(&body)).await.unwrap();

    let (_, _, message) = eventually("NamesHeld True, naming the holder", CONVERGE, || async {
        let wp = plugins.get(&name).await.ok()?;
        condition(&wp, "NamesHeld").filter(|(status, reason, _)| status == "True" && reason == "MadeByAnotherPlugin")
    })
    .await;
    let handover = format!("kubewasm handover --from held-other --to {name} --kind ConfigMap --namespace {ns}");
    assert!(message.contains("plugin `held-other` did") && message.contains(&handover), "{message}");
    let wp = plugins.get(&name).await.unwrap();
    let (rbac, _, _) = condition(&wp, "RBACMissing").unwrap_or_default();
    assert_ne!(rbac, "True", "the host refused it, not the API server");
    stop.cancel();
    source.await.unwrap();
}
