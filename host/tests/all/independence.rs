//! The second layer on its own (issue 49): the host's authorizer switched off (a test build's
//! `RuntimeConfig::authorizer_allows_everything`), each plugin sent as its own ServiceAccount
//! with the RBAC its grants derive (as `kubewasm rbac` prints it, made by the host here), and the
//! shipped admission policies of deploy/base installed. Every hostile request of the isolation
//! tests that reaches the API server must be refused there. What the API server cannot see
//! (cached reads, host memory, Events queueing, the address checks of the writer, which objects a
//! plugin controls) is host-only, listed in SECURITY.md and tested in isolation*.rs.

use crate::common;

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use kube::api::{Api, PostParams};
use kubewasm_host::app::App;
use kubewasm_host::hotload::Options;
use kubewasm_host::identity::Identities;
use kubewasm_host::plugin::RuntimeConfig;
use kubewasm_host::rbac::Identity;
use kubewasm_testenv::ControlPlane;
use serde_json::{Value, json};

use common::examples::{CONVERGE, deploy_dir};
use common::hostile::{
    Breaches, bind_cluster_admin, calls, config_map_kind, host_namespace, hostile, marker, namespace_kind,
};
use common::{eventually, run_ok};

/// A host whose authorizer allows everything, sending each plugin as its own identity, whose
/// RBAC it makes from the plugin's grants.
pub(crate) fn unguarded_host(client: &kube::Client) -> App {
    let identity = Identity { namespace: "kubewasm-system".into(), host_service_account: "kubewasm".into() };
    let options = Options { identity: Some(identity), provision_rbac: true, ..Options::default() };
    let runtime = RuntimeConfig::default().authorizer_allows_everything();
    App::with_runtime(client.clone(), runtime, None, options).unwrap()
}

/// Installs the admission policies deploy/base ships, and waits until the API server enforces
/// them: a probe identity that RBAC allows everything is refused a write in the host's namespace.
async fn install_policies(cp: &ControlPlane, admin: &kube::Client, host_ns: &str) {
    for file in ["base/plugin-mark-policy.yaml", "base/plugin-dangerous-kinds-policy.yaml"] {
        let mut apply = cp.kubectl();
        apply.args(["apply", "--server-side", "-f"]).arg(deploy_dir().join(file));
        run_ok(apply);
    }
    bind_cluster_admin(admin, "indep-probe").await;
    let probe = Identities::host(admin.clone()).impersonating("kubewasm-system").client("indep-probe");
    let in_host: Api<ConfigMap> = Api::namespaced(probe, host_ns);
    let mut n = 0;
    eventually("the admission policies in force", Duration::from_secs(60), || {
        n += 1;
        let (api, name) = (in_host.clone(), format!("indep-probe-{n}"));
        async move {
            let body = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
            api.create(&PostParams::default(), &body).await.err().filter(|e| e.to_string().contains("host namespace"))
        }
    })
    .await;
}

async fn create<K>(api: &Api<K>, body: Value) -> K
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    api.create(&PostParams::default(), &serde_json::from_value(body).unwrap()).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_hosts_authorizer_off_the_api_server_alone_refuses_every_hostile_write_that_reaches_it() {
    let Some(cp) = ControlPlane::shared() else { return };
    let client = cp.admin_client().await;
    let host_ns = host_namespace(&client).await;
    install_policies(&cp, &client, host_ns).await;
    let ns = cp.namespace("indep").await;
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    // Made by another plugin: marked as its.
    create(&config_maps, json!({"metadata": {"name": "theirs", "labels": {"kubewasm.dev/plugin": "other"}}})).await;
    let guarded = json!({"metadata": {"name": format!("{ns}-guarded"), "labels": {"indep": "ns",
                         "pod-security.kubernetes.io/enforce": "baseline"}}});
    let namespaces: Api<Namespace> = Api::all(client.clone());
    create(&namespaces, guarded).await;

    // Each call is refused by the host when its authorizer is on (isolation*.rs); here only the
    // API server stands in the way. A reconcile with a refused call fails and is retried, so the
    // counts below grow; each call must be refused every time.
    let secret_kind = json!({"version": "v1", "kind": "Secret"});
    let service_kind = json!({"version": "v1", "kind": "Service"});
    let policy_kind =
        json!({"group": "admissionregistration.k8s.io", "version": "v1", "kind": "ValidatingAdmissionPolicy"});
    let hostile_calls = json!([
        // The host's namespace (mark policy, first rule).
        {"op": "apply", "kind": config_map_kind(), "namespace": host_ns, "name": "indep-planted", "body": {"data": {"a": "b"}}},
        // Another plugin's object (mark policy, second rule), changed and deleted.
        {"op": "merge-patch", "kind": config_map_kind(), "namespace": "$trigger", "name": "theirs", "body": {"data": {"a": "b"}}},
        {"op": "delete", "kind": config_map_kind(), "namespace": "$trigger", "name": "theirs"},
        // A forged mark (mark policy, third rule).
        {"op": "create", "kind": config_map_kind(), "namespace": "$trigger", "name": "forged",
         "body": {"metadata": {"labels": {"kubewasm.dev/plugin": "other"}}}},
        // Kinds its grants do not name (RBAC): a Secret read and written, an admission policy.
        {"op": "get", "kind": secret_kind, "namespace": host_ns, "name": "anything"},
        {"op": "apply", "kind": secret_kind, "namespace": "$trigger", "name": "planted", "body": {"stringData": {"a": "b"}}},
        {"op": "apply", "kind": policy_kind, "name": "indep-freeze", "body": {"spec": {"validations": [{"expression": "false"}]}}},
        // A Service it may write (RBAC allows it), with externalIPs (mark policy, fifth rule).
        {"op": "apply", "kind": service_kind, "namespace": "$trigger", "name": "indep-lb",
         "body": {"spec": {"ports": [{"port": 80}], "externalIPs": ["10.0.0.53"]}}},
        marker("indep-done"),
    ]);
    let dir = tempfile::tempdir().unwrap();
    let mut app = unguarded_host(&client);
    let settings = json!({"selector": "indep=cm", "owns": [config_map_kind()], "writes": [service_kind], "onSelected": hostile_calls});
    app.add_plugin(&hostile(dir.path(), "indep-cm", "", settings)).await.unwrap();
    // A status write that strips a Namespace's Pod Security label (mark policy, fourth rule).
    let strip =
        json!([{"op": "move", "from": "/metadata/labels/pod-security.kubernetes.io~1enforce", "path": "/status/x"}]);
    let settings = json!({"for": namespace_kind(), "selector": "indep=ns", "onSelected": [
        {"op": "json-patch-status", "kind": namespace_kind(), "name": "$trigger", "body": strip},
    ]});
    app.add_plugin(&hostile(dir.path(), "indep-ns", "", settings)).await.unwrap();
    create(&config_maps, json!({"metadata": {"name": "trigger", "labels": {"indep": "cm"}}})).await;

    // Every hostile call refused at least once, as the policies' compile allows.
    let wanted = [
        ("indep-cm", "client.apply", 4.0),
        ("indep-cm", "client.patch", 1.0),
        ("indep-cm", "client.delete", 1.0),
        ("indep-cm", "client.create", 1.0),
        ("indep-cm", "client.get", 1.0),
        ("indep-ns", "client.patch-status", 1.0),
    ];
    let refused = |(plugin, function, n): &(&str, &str, f64)| calls(&app, plugin, function, "forbidden") >= *n;
    eventually("every hostile call refused by the API server, as often as it is called", CONVERGE, || async {
        wanted.iter().all(refused).then_some(())
    })
    .await;

    // Each counted as the API server's refusal, which RBACMissing's alert watches.
    for plugin in ["indep-cm", "indep-ns"] {
        let wanted: f64 = wanted.iter().filter(|(p, ..)| *p == plugin).map(|(.., n)| n).sum();
        let counted = common::hostile::apiserver_forbidden(&app, plugin);
        assert!(counted >= wanted, "{plugin}: {counted} refusals by the API server counted, {wanted} at least made");
    }

    let mut breaches = Breaches::default();
    let theirs = config_maps.get_opt("theirs").await.unwrap();
    breaches.check(theirs.as_ref().is_some_and(|c| c.data.is_none()), || format!("theirs changed: {theirs:?}"));
    let planted = Api::<ConfigMap>::namespaced(client.clone(), host_ns).get_opt("indep-planted").await.unwrap();
    breaches.check(planted.is_none(), || "a ConfigMap planted in the host's namespace".into());
    let forged = config_maps.get_opt("forged").await.unwrap();
    breaches.check(forged.is_none(), || "an object made with another plugin's mark".into());
    let service = Api::<k8s_openapi::api::core::v1::Service>::namespaced(client.clone(), &ns);
    let lb = service.get_opt("indep-lb").await.unwrap();
    breaches.check(lb.is_none(), || format!("a Service with externalIPs: {lb:?}"));
    let secret = Api::<Secret>::namespaced(client.clone(), &ns).get_opt("planted").await.unwrap();
    breaches.check(secret.is_none(), || "a Secret written without a grant".into());
    let guarded = namespaces.get(&format!("{ns}-guarded")).await.unwrap().metadata.labels.unwrap_or_default();
    let label = guarded.get("pod-security.kubernetes.io/enforce").map(String::as_str);
    breaches.check(label == Some("baseline"), || format!("the Pod Security label stripped: {guarded:?}"));
    let policies: Api<kube::api::DynamicObject> = Api::all_with(
        client.clone(),
        &kube::discovery::ApiResource::from_gvk(&kube::core::GroupVersionKind::gvk(
            "admissionregistration.k8s.io",
            "v1",
            "ValidatingAdmissionPolicy",
        )),
    );
    let freeze = policies.get_opt("indep-freeze").await.unwrap();
    breaches.check(freeze.is_none(), || "an admission policy made by a plugin".into());
    // Calls that got through show as `ok`: none may, but the marker's applies (checked above
    // by what exists).
    for (plugin, function, _) in wanted.iter().filter(|(_, f, _)| *f != "client.apply") {
        let through = calls(&app, plugin, function, "ok");
        breaches.check(through == 0.0, || format!("{plugin}'s {function} answered ok {through} times"));
    }
    breaches.assert_none("a hostile request with the host's authorizer off");
    assert!(app.shut_down(Duration::from_secs(15)).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_hosts_authorizer_off_the_api_server_refuses_a_secret_read_outside_the_namespaces_named_for_secrets() {
    let Some(cp) = ControlPlane::shared() else { return };
    let client = cp.admin_client().await;
    let named = cp.namespace("indep-vault").await;
    let elsewhere = cp.namespace("indep-else").await;
    for (ns, name) in [(&named, "in-secret"), (&elsewhere, "out-secret")] {
        create(&Api::<Secret>::namespaced(client.clone(), ns), json!({"metadata": {"name": name}})).await;
    }
    let dir = tempfile::tempdir().unwrap();
    let settings = json!({
        "selector": format!("kubewasm.test/intruder={named}"), "report": "secret-report",
        "secrets": [format!("{named}/in-secret"), format!("{elsewhere}/out-secret")],
    });
    let config = format!("grants: {{read: [Secret], sensitive: {{namespaces: [{named}]}}}}\nsettings: {settings}\n");
    let wasm = common::install_plugin(dir.path(), "indep-secrets", "fixture_intruder.wasm", &config);
    let file = kubewasm_host::app::PluginFile {
        name: "indep-secrets".into(),
        wasm: Some(wasm),
        config: Some(dir.path().join("indep-secrets.yaml")),
    };
    let mut app = unguarded_host(&client);
    app.add_plugin(&file).await.unwrap();
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), &named);
    create(&config_maps, json!({"metadata": {"name": "trigger", "labels": {"kubewasm.test/intruder": named}}})).await;

    let report =
        eventually("the report", CONVERGE, || async { config_maps.get_opt("secret-report").await.unwrap() }).await;
    let data = report.data.unwrap_or_default();
    let at = |key: String| data.get(&key).cloned().unwrap_or_default();
    assert_eq!(at(format!("get.{named}.in-secret")), "found", "RBAC allows it where named: {data:?}");
    let outside = at(format!("get.{elsewhere}.out-secret"));
    assert!(outside.contains("Forbidden"), "the API server refuses it elsewhere: {data:?}");
    assert!(calls(&app, "indep-secrets", "client.get", "forbidden") >= 1.0);
    assert!(app.shut_down(Duration::from_secs(15)).await);
}
