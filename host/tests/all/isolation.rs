//! Plugins cannot harm each other, against a real kube-apiserver + etcd: a plugin that owns
//! ConfigMaps can neither rewrite another plugin's module ConfigMap (protected, whatever its
//! grants) nor write ConfigMaps it does not control; the ones it controls it writes as before.
//! Each refusal is an `AccessDenied` Event and a `forbidden` host-call metric. A plugin confined
//! to namespaces neither sees, writes nor is handed keys outside them. No plugin reads the
//! Secrets of the host's own namespace (its registry credentials and signature keys), whatever
//! its grants.

use crate::common;

use std::time::Duration;

use futures::FutureExt as _;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kubewasm_host::app::{App, PluginFile};
use kubewasm_host::hotload::WasmPlugin;
use kubewasm_testenv::ControlPlane;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use common::{eventually, install_plugin, metric_value, plugin_wasm};

const CONVERGE: Duration = Duration::from_secs(90);

/// An `intruder` plugin file with `grants` (YAML lines) and `settings`.
fn intruder(dir: &std::path::Path, name: &str, grants: &str, settings: Value) -> PluginFile {
    let config = format!("{grants}settings: {settings}\n");
    PluginFile {
        name: name.into(),
        wasm: Some(install_plugin(dir, name, "fixture_intruder.wasm", &config)),
        config: Some(dir.join(format!("{name}.yaml"))),
    }
}

/// Settings making the intruder reconcile ConfigMaps labelled `kubewasm.test/intruder=<label>`
/// and make `writes`.
fn attempts(label: &str, writes: Value) -> Value {
    json!({"selector": format!("kubewasm.test/intruder={label}"), "writes": writes})
}

async fn create_config_map(api: &Api<ConfigMap>, body: Value) -> ConfigMap {
    api.create(&PostParams::default(), &serde_json::from_value(body).unwrap()).await.unwrap()
}

/// Waits for an `AccessDenied` Event reported by `kubewasm/<plugin>` in `ns`; returns its note.
async fn access_denied(client: &kube::Client, ns: &str, plugin: &str) -> String {
    let events = Api::<Event>::namespaced(client.clone(), ns);
    let reporter = format!("kubewasm/{plugin}");
    eventually(&format!("an AccessDenied event from {plugin}"), CONVERGE, || async {
        let list = events.list(&ListParams::default()).await.unwrap();
        list.items.into_iter().find_map(|e| {
            (e.reason.as_deref() == Some("AccessDenied") && e.reporting_controller.as_deref() == Some(&reporter))
                .then(|| e.note.unwrap_or_default())
        })
    })
    .await
}

fn forbidden_calls(app: &App, plugin: &str, function: &str) -> f64 {
    let text = prometheus::TextEncoder::new().encode_to_string(&app.registry().gather()).unwrap();
    let labels = [("plugin", plugin), ("function", function), ("result", "forbidden")];
    metric_value(&text, "kubewasm_plugin_host_calls_total", &labels).unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_cannot_overwrite_another_plugins_module_config_map_whatever_its_grants() {
    let Some(cp) = ControlPlane::shared() else { return };
    let client = cp.admin_client().await;
    common::examples::install_wasm_plugin_crd(&client).await;
    let modules = cp.namespace("iso-modules").await;
    let attack = cp.namespace("iso-attack").await;

    // The victim: a WasmPlugin whose pinned module lives in the module namespace.
    let victim_wasm = plugin_wasm("fixture_stamper.wasm");
    let digest = kubewasm_host::plugin::sha256_hex(&victim_wasm);
    let module_api: Api<ConfigMap> = Api::namespaced(client.clone(), &modules);
    let module = create_config_map(
        &module_api,
        json!({"metadata": {"name": "victim-module"}, "binaryData": {"plugin.wasm": ByteString(victim_wasm.to_vec())}}),
    )
    .await;
    let app_dir = tempfile::tempdir().unwrap();
    let mut app = common::app(&client);
    let stop = CancellationToken::new();
    let source = tokio::spawn(app.wasm_plugin_source(&modules).selector(&format!("test={modules}")).run(stop.clone()));
    let plugins: Api<WasmPlugin> = Api::all(client.clone());
    let victim = format!("victim-{modules}");
    let spec = json!({
        "apiVersion": "kubewasm.dev/v1alpha1", "kind": "WasmPlugin",
        "metadata": {"name": victim, "labels": {"test": modules}},
        "spec": {
            "module": {"configMap": {"name": "victim-module", "key": "plugin.wasm", "sha256": digest}},
            "grants": common::approved("fixture_stamper.wasm", json!({"write": ["ConfigMap"]})),
            "settings": {"version": "victim", "selector": format!("kubewasm.test/victim={modules}")},
        },
    });
    plugins.patch(&victim, &PatchParams::apply("kubewasm-test"), &Patch::Apply(&spec)).await.unwrap();
    eventually("the victim serves its pinned module", CONVERGE, || async {
        let wp = plugins.get(&victim).await.ok()?;
        (wp.status?.loaded_sha256.as_deref() == Some(digest.as_str())).then_some(())
    })
    .await;

    // Two attackers that own ConfigMaps: one with the default grants, one granted `write:
    // [ConfigMap]` anywhere. Both try to rewrite, patch and delete the victim's module, then
    // write a ConfigMap they control (which shows their reconcile got that far).
    let writes = |marker: &str| {
        json!([
            {"how": "apply", "namespace": modules, "name": "victim-module", "data": {"pwned": "yes"}, "controlled": true},
            {"how": "patch", "namespace": modules, "name": "victim-module", "data": {"pwned": "yes"}},
            {"how": "delete", "namespace": modules, "name": "victim-module"},
            {"how": "apply", "name": marker, "controlled": true, "data": {"done": "yes"}},
        ])
    };
    let granted = "grants: {write: [ConfigMap]}\n";
    app.add_plugin(&intruder(app_dir.path(), "owner-only", "", attempts(&attack, writes("owner-only-done"))))
        .await
        .unwrap();
    app.add_plugin(&intruder(app_dir.path(), "granted", granted, attempts(&attack, writes("granted-done"))))
        .await
        .unwrap();
    let attack_api: Api<ConfigMap> = Api::namespaced(client.clone(), &attack);
    create_config_map(
        &attack_api,
        json!({"metadata": {"name": "trigger", "labels": {"kubewasm.test/intruder": attack}}}),
    )
    .await;
    for marker in ["owner-only-done", "granted-done"] {
        eventually(&format!("{marker} written"), CONVERGE, || async { attack_api.get_opt(marker).await.unwrap() })
            .await;
    }

    let after = module_api.get("victim-module").await.unwrap();
    assert_eq!(after.metadata.resource_version, module.metadata.resource_version, "the module ConfigMap was written");
    assert_eq!(after.binary_data, module.binary_data);
    for attacker in ["owner-only", "granted"] {
        let note = access_denied(&client, &attack, attacker).await;
        assert!(note.contains("victim-module"), "{note}");
        for function in ["client.apply", "client.patch", "client.delete"] {
            assert!(forbidden_calls(&app, attacker, function) >= 1.0, "{attacker} {function} not counted as forbidden");
        }
    }
    let note = access_denied(&client, &attack, "granted").await;
    assert!(note.contains("protected"), "the granted attacker is refused by the protection: {note}");
    let wp = plugins.get(&victim).await.unwrap();
    assert_eq!(wp.status.unwrap().loaded_sha256.as_deref(), Some(digest.as_str()), "the victim's module still serves");

    stop.cancel();
    source.await.unwrap();
    assert!(app.shut_down(Duration::from_secs(15)).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_writes_owned_kind_objects_it_controls_and_no_others() {
    let Some(cp) = ControlPlane::shared() else { return };
    let client = cp.admin_client().await;
    let ns = cp.namespace("iso-owned").await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let bystander = create_config_map(&api, json!({"metadata": {"name": "bystander"}, "data": {"k": "v"}})).await;
    let foreign_owner = json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": "bystander",
                                "uid": bystander.metadata.uid, "controller": true}]);
    let other = create_config_map(
        &api,
        json!({"metadata": {"name": "someone-elses", "ownerReferences": foreign_owner}, "data": {"k": "v"}}),
    )
    .await;

    let writes = json!([
        {"how": "apply", "name": "stranger", "data": {"k": "mine"}},
        {"how": "patch", "name": "bystander", "data": {"k": "mine"}},
        {"how": "delete", "name": "bystander"},
        {"how": "patch", "name": "someone-elses", "data": {"k": "mine"}},
        {"how": "apply", "name": "child", "controlled": true, "data": {"k": "mine"}},
    ]);
    let dir = tempfile::tempdir().unwrap();
    let mut app = common::app(&client);
    app.add_plugin(&intruder(dir.path(), "intruder", "", attempts(&ns, writes))).await.unwrap();
    eventually("readiness", CONVERGE, || async { app.readiness().is_ready().then_some(()) }).await;
    let trigger =
        create_config_map(&api, json!({"metadata": {"name": "trigger", "labels": {"kubewasm.test/intruder": ns}}}))
            .await;

    // Controlled: written, with the controller reference to the trigger.
    let child =
        eventually("the controlled child written", CONVERGE, || async { api.get_opt("child").await.unwrap() }).await;
    let owner = &child.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!((owner.uid.as_str(), owner.controller), (trigger.metadata.uid.as_deref().unwrap(), Some(true)));
    // Not controlled: refused, nothing changed.
    assert!(api.get_opt("stranger").await.unwrap().is_none(), "an uncontrolled object was created");
    let unchanged = |before: &ConfigMap, after: ConfigMap| {
        assert_eq!(
            after.metadata.resource_version, before.metadata.resource_version,
            "{:?} was written",
            after.metadata.name
        );
    };
    unchanged(&bystander, api.get("bystander").await.unwrap());
    unchanged(&other, api.get("someone-elses").await.unwrap());
    let note = access_denied(&client, &ns, "intruder").await;
    assert!(note.contains("carries no controller ownerReference"), "{note}");
    for function in ["client.apply", "client.patch", "client.delete"] {
        assert!(forbidden_calls(&app, "intruder", function) >= 1.0, "{function} not counted as forbidden");
    }
    let by_the_server = common::hostile::apiserver_forbidden(&app, "intruder");
    assert_eq!(by_the_server, 0.0, "the host refused these, not the API server (RBACMissing's metric)");
    assert!(app.shut_down(Duration::from_secs(15)).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_confined_to_namespaces_neither_sees_nor_writes_outside_them() {
    let Some(cp) = ControlPlane::shared() else { return };
    let client = cp.admin_client().await;
    let inside = cp.namespace("iso-inside").await;
    let outside = cp.namespace("iso-outside").await;
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let label = json!({"metadata": {"labels": {"kubewasm.test/scope": inside}}});
    namespaces.patch(&inside, &PatchParams::default(), &Patch::Merge(&label)).await.unwrap();

    // Two plugins granted ConfigMaps anywhere, one confined by name, one by label selector.
    let dir = tempfile::tempdir().unwrap();
    let mut app = common::app(&client);
    let scopes = [
        ("by-name", format!("{{names: [{inside}]}}")),
        ("by-selector", format!("{{selector: 'kubewasm.test/scope={inside}'}}")),
    ];
    for (name, scope) in &scopes {
        let grants = format!("grants: {{write: [ConfigMap], namespaces: {scope}}}\n");
        let mut settings = attempts(
            &inside,
            json!([
                {"how": "apply", "namespace": outside, "name": format!("{name}-out"), "data": {"k": "v"}},
                {"how": "apply", "namespace": inside, "name": format!("{name}-in"), "data": {"k": "v"}},
            ]),
        );
        // The same trigger label in both namespaces, and a report of what the cache shows.
        settings["report"] = json!(format!("{name}-report"));
        settings["reads"] = json!([format!("{inside}/trigger"), format!("{outside}/trigger")]);
        let file = intruder(dir.path(), name, &grants, settings);
        app.add_plugin(&file).await.unwrap();
    }
    eventually("readiness", CONVERGE, || async { app.readiness().is_ready().then_some(()) }).await;
    for ns in [&inside, &outside] {
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
        create_config_map(&api, json!({"metadata": {"name": "trigger", "labels": {"kubewasm.test/intruder": inside}}}))
            .await;
    }

    let inside_api: Api<ConfigMap> = Api::namespaced(client.clone(), &inside);
    let outside_api: Api<ConfigMap> = Api::namespaced(client.clone(), &outside);
    for (name, _) in &scopes {
        let report = eventually(&format!("{name} reported"), CONVERGE, || async {
            inside_api.get_opt(&format!("{name}-report")).await.unwrap()
        })
        .await;
        let data = report.data.unwrap_or_default();
        assert_eq!(data.get(&format!("{inside}.trigger")).map(String::as_str), Some("found"), "{name}: {data:?}");
        assert_eq!(data.get(&format!("{outside}.trigger")).map(String::as_str), Some("absent"), "{name}: {data:?}");
        assert_eq!(data.get("listed").map(String::as_str), Some("1"), "{name} lists only inside: {data:?}");
        assert!(inside_api.get_opt(&format!("{name}-in")).await.unwrap().is_some(), "{name} wrote inside");
        assert!(outside_api.get_opt(&format!("{name}-out")).await.unwrap().is_none(), "{name} wrote outside");
        assert!(forbidden_calls(&app, name, "client.apply") >= 1.0, "{name}: the outside write not counted");
    }
    let note = access_denied(&client, &inside, "by-name").await;
    assert!(note.contains("outside the namespaces"), "{note}");
    assert!(app.shut_down(Duration::from_secs(15)).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_confined_plugin_is_never_handed_a_key_outside_its_namespaces() {
    let Some(cp) = ControlPlane::shared() else { return };
    let client = cp.admin_client().await;
    let inside = cp.namespace("iso-keys-in").await;
    let outside = cp.namespace("iso-keys-out").await;

    // A follower: caches sync and triggers fill the queue, but no worker takes a key, so the
    // test reads every key the triggers queued.
    let (_leading, rx) = tokio::sync::watch::channel(false);
    let dir = tempfile::tempdir().unwrap();
    let mut app = common::app(&client);
    app.set_leader_gate(kubewasm_host::leader::LeaderGate::new(rx));
    let grants = format!("grants: {{namespaces: {{names: [{inside}]}}}}\n");
    app.add_plugin(&intruder(dir.path(), "confined", &grants, attempts(&inside, json!([])))).await.unwrap();
    eventually("readiness", CONVERGE, || async { app.readiness().is_ready().then_some(()) }).await;
    let workers = app.plugins().workers("confined").await.unwrap();

    // In this order (a watch delivers in order): outside a trigger and an object it controls
    // (For and Owns keys outside), then the same inside, whose keys mark the end.
    let labels = json!({"kubewasm.test/intruder": inside});
    let owned_by = |owner: &str| {
        json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": owner,
        "uid": "00000000-0000-0000-0000-000000000001", "controller": true}])
    };
    for ns in [&outside, &inside] {
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
        create_config_map(&api, json!({"metadata": {"name": "trigger", "labels": labels}})).await;
        let owned = json!({"metadata": {"name": "owned", "labels": labels, "ownerReferences": owned_by("owner")}});
        create_config_map(&api, owned).await;
    }
    let mut keys = Vec::new();
    let ends = [format!("{inside}/owned"), format!("{inside}/owner")];
    eventually("the inside keys (For and Owns) queued", CONVERGE, || {
        while !workers.queue().is_empty() {
            let key = workers.queue().get().now_or_never().flatten().unwrap();
            workers.queue().done(&key);
            keys.push(key.as_str().to_owned());
        }
        let done = ends.iter().all(|end| keys.contains(end));
        async move { done.then_some(()) }
    })
    .await;
    assert!(keys.iter().all(|k| k.starts_with(&format!("{inside}/"))), "keys outside the scope: {keys:?}");
    assert!(app.shut_down(Duration::from_secs(15)).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_granted_secrets_reads_them_only_where_named_and_none_in_the_hosts_namespace() {
    let Some(cp) = ControlPlane::shared() else { return };
    let client = cp.admin_client().await;
    let host = cp.namespace("iso-host").await;
    let team = cp.namespace("iso-team").await;
    let elsewhere = cp.namespace("iso-else").await;
    for (ns, name) in [(&host, "pull-secret"), (&team, "team-secret"), (&elsewhere, "other-secret")] {
        let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
        let body = json!({"metadata": {"name": name}, "stringData": {"token": "s3cret"}});
        secrets.create(&PostParams::default(), &serde_json::from_value(body).unwrap()).await.unwrap();
    }

    let dir = tempfile::tempdir().unwrap();
    let mut app = common::app(&client);
    // As App::new protects the namespace it runs in (POD_NAMESPACE), shared by every test here.
    app.protected().namespace(&host, "is the host's own namespace");
    let mut settings = attempts(&team, json!([]));
    settings["report"] = json!("secrets-report");
    settings["secrets"] =
        json!([format!("{host}/pull-secret"), format!("{team}/team-secret"), format!("{elsewhere}/other-secret")]);
    // The operator names the host's namespace too: it stays hidden whatever the grants say.
    let grants = format!("grants: {{read: [Secret], sensitive: {{namespaces: [{team}, {host}]}}}}\n");
    app.add_plugin(&intruder(dir.path(), "secret-reader", &grants, settings)).await.unwrap();
    eventually("readiness", CONVERGE, || async { app.readiness().is_ready().then_some(()) }).await;
    let team_api: Api<ConfigMap> = Api::namespaced(client.clone(), &team);
    create_config_map(&team_api, json!({"metadata": {"name": "trigger", "labels": {"kubewasm.test/intruder": team}}}))
        .await;

    let report =
        eventually("secret-reader reported", CONVERGE, || async { team_api.get_opt("secrets-report").await.unwrap() })
            .await;
    let data = report.data.unwrap_or_default();
    let at = |key: String| data.get(&key).cloned().unwrap_or_default();
    assert_eq!(at(format!("cache.{team}.team-secret")), "found", "{data:?}");
    assert_eq!(at(format!("get.{team}.team-secret")), "found", "{data:?}");
    assert_eq!(at(format!("list.{team}")), "1", "{data:?}");
    assert_eq!(at(format!("cache.{host}.pull-secret")), "absent", "the cache hides it: {data:?}");
    assert_eq!(at(format!("cache.{elsewhere}.other-secret")), "absent", "not named for Secrets: {data:?}");
    assert_ne!(at(format!("get.{elsewhere}.other-secret")), "found", "not named for Secrets: {data:?}");
    assert_ne!(at(format!("list.{elsewhere}")), "1", "not named for Secrets: {data:?}");
    assert_eq!(at(format!("list.{host}")), "0", "the cache lists none: {data:?}");
    assert!(at(format!("get.{host}.pull-secret")).starts_with("Forbidden"), "the uncached get: {data:?}");
    assert!(forbidden_calls(&app, "secret-reader", "client.get") >= 1.0);
    let note = access_denied(&client, &team, "secret-reader").await;
    assert!(note.contains("host's own namespace"), "{note}");
    assert!(app.shut_down(Duration::from_secs(15)).await);
}
