//! deploy/ against a real kube-apiserver: every kustomization passes server-side dry-run; the
//! examples overlay's RBAC is enough — `kubewasm run` as its ServiceAccount makes the example
//! plugins converge without one forbidden request (proven by the apiserver's audit log) — and
//! the check can fail: without one rule of a plugin's own identity the audit log shows 403s; the
//! admission policy guarding what each plugin made refuses every other plugin; and the binary
//! works with the in-cluster config a pod gets (env + mounted service-account files). There,
//! namespace-defaults is a WasmPlugin whose module is pulled from the harness registry (TLS,
//! htpasswd) with a pull Secret in the host's namespace.

use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::api::{Api, PostParams};
use kubewasm_testenv::{ControlPlane, Registry};

use common::audit::{SA_USER, audit_events, code, describe, examples_cluster};
use common::examples::{self, CONVERGE, deploy_dir, install_examples};
use common::process::{HostProcess, kubewasm_run, service_account_token, token_kubeconfig};
use common::{eventually, registry, run_ok, test_compile_cache};

fn unique_id() -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
    format!("{}-{nanos:x}", std::process::id())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kustomization_passes_server_side_dry_run() {
    let cp = ControlPlane::shared().expect("kube-apiserver, etcd and kubectl: run `make control-plane`");
    // A dry run creates nothing, so the namespaced objects would find no namespace: create it
    // for real first (an operator's CI checking against a live cluster has it already).
    let mut create = cp.kubectl();
    create.args(["create", "namespace", "kubewasm-system"]);
    run_ok(create);
    for dir in ["base", "overlays/examples", "overlays/sharded"] {
        let mut apply = cp.kubectl();
        apply.args(["apply", "--dry-run=server", "--server-side", "-k"]).arg(deploy_dir().join(dir));
        let out = run_ok(apply);
        assert!(out.contains("deployment.apps/kubewasm serverside-applied (server dry run)"), "{dir}:\n{out}");
    }
}

/// A new user's `kubectl apply` of the CRD printed `Warning: unrecognized format "uint64"` (and
/// `"uint"`, `"uint32"`): formats the API server does not know (issue 48).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubewasm_manifests_prints_the_objects_kustomize_renders_for_deploy_base() {
    let cp = ControlPlane::shared().expect("kube-apiserver, etcd and kubectl: run `make control-plane`");
    // Each object by kind and name, its numbers compared as numbers (kustomize writes the CRD's
    // `minimum: 0.0` as 0).
    let objects = |yaml: &str| -> BTreeMap<String, serde_json::Value> {
        let documents = serde_yaml::Deserializer::from_str(yaml);
        let values = documents.map(|d| serde::Deserialize::deserialize(d).unwrap()).map(integral);
        let key =
            |o: &serde_json::Value| format!("{} {}/{}", o["kind"], o["metadata"]["namespace"], o["metadata"]["name"]);
        values.filter(|v: &serde_json::Value| !v.is_null()).map(|o| (key(&o), o)).collect()
    };
    let mut kustomize = cp.kubectl();
    kustomize.arg("kustomize").arg(deploy_dir().join("base"));
    let kustomized = objects(&run_ok(kustomize));
    let mut printed = Command::new(env!("CARGO_BIN_EXE_kubewasm"));
    printed.arg("manifests");
    let printed = objects(&run_ok(printed));
    assert!(kustomized.len() > 8, "only {} objects in deploy/base", kustomized.len());
    assert_eq!(printed.keys().collect::<Vec<_>>(), kustomized.keys().collect::<Vec<_>>());
    for (key, object) in &printed {
        assert!(object == &kustomized[key], "`kubewasm manifests` and deploy/base differ in {key}");
    }
}

/// `value` with every integral float as an integer.
fn integral(value: serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match value {
        Value::Number(n) if n.as_f64().is_some_and(|f| f.fract() == 0.0) && !n.is_i64() && !n.is_u64() => {
            Value::from(n.as_f64().unwrap() as i64)
        }
        Value::Array(items) => Value::Array(items.into_iter().map(integral).collect()),
        Value::Object(map) => Value::Object(map.into_iter().map(|(k, v)| (k, integral(v))).collect()),
        other => other,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wasmplugin_crd_is_applied_without_a_warning() {
    let cp = ControlPlane::shared().expect("kube-apiserver, etcd and kubectl: run `make control-plane`");
    let mut apply = cp.kubectl();
    apply.args(["apply", "--dry-run=server", "--server-side", "-f"]).arg(deploy_dir().join("crds/wasmplugin.yaml"));
    let out = apply.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(!stderr.contains("Warning"), "the API server warned about the CRD:\n{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_examples_overlay_lets_the_plugins_converge_without_a_forbidden_request_and_one_rule_less_is_refused() {
    let work = tempfile::tempdir().unwrap();
    let (cp, log) = examples_cluster(work.path()).await;
    let admin = cp.admin_client().await;

    let token = service_account_token(&admin, "kubewasm-system", "kubewasm").await;
    let kubeconfig = work.path().join("kubeconfig");
    let server = cp.admin_config().cluster_url.to_string();
    std::fs::write(&kubeconfig, token_kubeconfig(&server, &cp.dir().join("ca.crt"), &token)).unwrap();
    let plugins = tempfile::tempdir().unwrap();
    install_examples(plugins.path());
    // Without the registry built (`make registry`; `make test` builds it) namespace-defaults
    // stays a plugin file.
    let registry = Registry::start_or_skip().await;
    let ca = work.path().join("registry-ca.pem");
    let pushed = match &registry {
        Some(registry) => {
            for file in ["namespace-defaults.wasm", "namespace-defaults.yaml"] {
                std::fs::remove_file(plugins.path().join(file)).unwrap();
            }
            Some(registry::example_wasm_plugin(&admin, registry, "namespace-defaults", &ca).await)
        }
        None => None,
    };
    let start = || {
        let mut command = kubewasm_run(plugins.path());
        command.arg("--kubeconfig").arg(&kubeconfig).arg("--compile-cache").arg(test_compile_cache());
        command.args(["--leader-elect", "--leader-election-namespace", "kubewasm-system", "--impersonate-plugins"]);
        if pushed.is_some() {
            command.arg("--oci-ca-file").arg(&ca);
        }
        HostProcess::spawn(command)
    };

    let mut host = start();
    host.ready(CONVERGE).await;
    eventually("the host leads", CONVERGE, || async {
        host.metric("leader_election_master_status", &[("name", "kubewasm")]).filter(|v| *v == 1.0)
    })
    .await;
    let id = unique_id();
    examples::all_converge(&admin, &id).await;
    if let Some(digest) = &pushed {
        eventually("the WasmPlugin namespace-defaults Ready from the registry", CONVERGE, || {
            registry::serves_digest(&admin, "namespace-defaults", digest)
        })
        .await;
    }
    host.signal("-TERM");
    let status = host.exited(Duration::from_secs(60)).await;
    assert!(status.success(), "kubewasm exited with {status}");

    let events = audit_events(&log);
    let verbs: std::collections::BTreeSet<&str> =
        events.iter().filter_map(|e| e.pointer("/verb").and_then(|v| v.as_str())).collect();
    for verb in ["watch", "create", "patch", "update", "delete"] {
        assert!(verbs.contains(verb), "the audit log has no {verb} by {SA_USER}: {verbs:?}");
    }
    let resources: std::collections::BTreeSet<&str> =
        events.iter().filter_map(|e| e.pointer("/objectRef/resource").and_then(|v| v.as_str())).collect();
    // The host's own rules (Lease, events) and every kind of the plugins' role were exercised.
    let used = ["leases", "events", "namespaces", "resourcequotas", "networkpolicies", "deployments", "configmaps"];
    for resource in used.into_iter().chain(["configmapsyncs", "wasmplugins"]) {
        assert!(resources.contains(resource), "the audit log has no request for {resource}: {resources:?}");
    }
    let forbidden: Vec<String> = events.iter().filter(|e| code(e) == Some(403)).map(describe).collect();
    assert!(forbidden.is_empty(), "forbidden requests by the host's ServiceAccount:\n{}", forbidden.join("\n"));

    let impersonated: std::collections::BTreeSet<&str> =
        events.iter().filter_map(|e| e.pointer("/impersonatedUser/username").and_then(|v| v.as_str())).collect();
    for name in ["namespace-defaults", "config-reloader", "configmap-sync"] {
        let user = format!("system:serviceaccount:kubewasm-system:kubewasm-plugin-{name}");
        assert!(impersonated.contains(user.as_str()), "no request was sent as {user}: {impersonated:?}");
    }
    // The host's own ClusterRole may create Events (its own): the plugins' must not be sent so.
    let events_as_host: Vec<String> = events
        .iter()
        .filter(|e| e.pointer("/objectRef/resource").and_then(|r| r.as_str()) == Some("events"))
        .filter(|e| e.pointer("/impersonatedUser").is_none())
        .map(describe)
        .collect();
    assert!(events_as_host.is_empty(), "Events sent as the host:\n{}", events_as_host.join("\n"));

    // One rule less in namespace-defaults' own identity (NetworkPolicies, which it owns) and the
    // same host is refused: the API server, not the host, stops the write.
    let roles = Api::<ClusterRole>::all(admin.clone());
    let role_name = "kubewasm-plugin-namespace-defaults";
    let mut role = roles.get(role_name).await.unwrap();
    let rules = role.rules.as_mut().unwrap();
    let before = rules.len();
    rules.retain(|r| !r.resources.iter().flatten().any(|res| res == "networkpolicies"));
    assert_eq!(rules.len(), before - 1);
    roles.replace(role_name, &PostParams::default(), &role).await.unwrap();
    let _host = start();
    // The restarted host answers the converged Namespaces' unchanged applies from its cache
    // (issue 30), so a new Namespace gives the plugin a NetworkPolicy to write.
    examples::create_namespace(&admin, &format!("fresh-{id}"), serde_json::json!({})).await;
    eventually("a 403 on networkpolicies in the audit log", CONVERGE, || async {
        audit_events(&log).into_iter().find(|e| {
            code(e) == Some(403) && e.pointer("/objectRef/resource").and_then(|r| r.as_str()) == Some("networkpolicies")
        })
    })
    .await;
}

/// The policy of deploy/base/plugin-mark-policy.yaml, on its own control plane (it binds every
/// plugin identity of `kubewasm-system`, which the shared one's tests use), with two plugin
/// identities allowed everything by RBAC: only admission stands between them.
#[tokio::test]
async fn the_mark_policy_lets_only_the_plugin_that_made_an_object_change_it_and_people_still_can() {
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::{DeleteParams, Patch, PatchParams};
    use kubewasm_host::identity::Identities;
    let cp = ControlPlane::builder().start().expect("a control plane (needs `make control-plane`)");
    let admin = cp.admin_client().await;
    let mut apply = cp.kubectl();
    apply.args(["apply", "--server-side", "-f"]).arg(deploy_dir().join("base/plugin-mark-policy.yaml"));
    run_ok(apply);
    for plugin in ["alpha", "beta"] {
        common::hostile::bind_cluster_admin(&admin, plugin).await;
    }
    let identities = Identities::host(admin.clone()).impersonating("kubewasm-system");
    let as_plugin = |plugin: &str| Api::<ConfigMap>::namespaced(identities.client(plugin), "default");
    let (alpha, beta, people) =
        (as_plugin("alpha"), as_plugin("beta"), Api::<ConfigMap>::namespaced(admin.clone(), "default"));
    let made_by = |plugin: &str, name: &str| -> ConfigMap {
        serde_json::from_value(
            serde_json::json!({"metadata": {"name": name, "labels": {"kubewasm.dev/plugin": plugin}}}),
        )
        .unwrap()
    };
    let data = |value: &str| Patch::Merge(serde_json::json!({"data": {"k": value}}));
    let params = PatchParams::default();
    // Alpha's RBAC binding takes effect once the API server's authorizer has seen it.
    eventually("alpha's ConfigMap, once its RBAC binding is in effect", Duration::from_secs(30), || async {
        alpha.create(&PostParams::default(), &made_by("alpha", "alphas")).await.ok()
    })
    .await;
    // The policy takes effect once the API server has compiled it: until then beta's write passes.
    // Beta's RBAC binding takes effect once the API server's authorizer has seen it: until then
    // RBAC refuses the write, which is not what this waits for.
    let refused = eventually("beta refused on alpha's ConfigMap by the policy", Duration::from_secs(30), || async {
        let refused = beta.patch("alphas", &params, &data("beta")).await.err()?;
        refused.to_string().contains("plugin beta may not change or delete what plugin alpha made").then_some(refused)
    })
    .await;
    assert!(refused.to_string().contains("plugin beta may not change or delete what plugin alpha made"), "{refused}");
    let refusal = |result: Result<ConfigMap, kube::Error>| result.err().map(|e| e.to_string()).unwrap_or_default();
    let deleted = beta.delete("alphas", &DeleteParams::default()).await.err().map(|e| e.to_string());
    assert!(deleted.unwrap_or_default().contains("may not change or delete what plugin alpha made"));
    let forged = refusal(beta.create(&PostParams::default(), &made_by("alpha", "forged")).await);
    assert!(forged.contains(r#"may not set the label kubewasm.dev/plugin to "alpha""#), "{forged}");
    let host_ns = serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kubewasm-system"}});
    let namespaces = Api::<k8s_openapi::api::core::v1::Namespace>::all(admin.clone());
    namespaces.create(&PostParams::default(), &serde_json::from_value(host_ns).unwrap()).await.unwrap();
    let in_host = Api::<ConfigMap>::namespaced(identities.client("beta"), "kubewasm-system");
    let hosted = refusal(in_host.create(&PostParams::default(), &made_by("beta", "mine")).await);
    assert!(hosted.contains("may not write in the host namespace"), "{hosted}");
    beta.create(&PostParams::default(), &made_by("beta", "betas")).await.expect("beta makes its own");
    beta.create(
        &PostParams::default(),
        &serde_json::from_value(serde_json::json!({"metadata": {"name": "nobodys"}})).unwrap(),
    )
    .await
    .expect("and unmarked ones");

    alpha.patch("alphas", &params, &data("alpha")).await.expect("alpha changes what it made");
    let unmark = Patch::Merge(serde_json::json!({"metadata": {"labels": {"kubewasm.dev/plugin": null}}}));
    let unmarked = refusal(alpha.patch("alphas", &params, &unmark).await);
    assert!(unmarked.contains(r#"to "" on an object marked "alpha""#), "alpha removed its own mark: {unmarked}");
    let claim = Patch::Merge(serde_json::json!({"metadata": {"labels": {"kubewasm.dev/plugin": "alpha"}}}));
    let claimed = refusal(alpha.patch("betas", &params, &claim).await);
    assert!(claimed.contains("may not change or delete what plugin beta made"), "{claimed}");
    alpha.patch("nobodys", &params, &claim).await.expect("an unmarked object becomes its first applier's");
    // Through status another plugin may write (the status of what it reconciles), not the mark.
    let ns_of = |plugin: &str| Api::<k8s_openapi::api::core::v1::Namespace>::all(identities.client(plugin));
    let marked_ns = serde_json::json!({"metadata": {"name": "alphas-ns", "labels": {"kubewasm.dev/plugin": "alpha"}}});
    ns_of("alpha").create(&PostParams::default(), &serde_json::from_value(marked_ns).unwrap()).await.unwrap();
    let condition = serde_json::json!({"status": {"conditions": [{"type": "Reconciled", "status": "True"}]}});
    ns_of("beta").patch_status("alphas-ns", &params, &Patch::Merge(condition)).await.expect("beta writes its status");
    let relabel = Patch::Merge(serde_json::json!({"metadata": {"labels": {"kubewasm.dev/plugin": "beta"}}}));
    let relabelled = ns_of("beta").patch_status("alphas-ns", &params, &relabel).await.err().map(|e| e.to_string());
    assert!(relabelled.unwrap_or_default().contains(r#"to "beta" on an object marked "alpha""#));
    people.patch("alphas", &params, &unmark).await.expect("a person may repair anything");
    people.delete("betas", &DeleteParams::default()).await.expect("and delete anything");
}

/// Runs `command` in a private mount namespace in which `sa_dir` is mounted over /run, so the
/// process sees it at /var/run/secrets/kubernetes.io/serviceaccount as a pod does; the host's
/// real /run is untouched. Needs root (CAP_SYS_ADMIN) for `unshare --mount`.
fn in_pod_mounts(run_dir: &Path, command: &Command) -> Command {
    let mut wrapped = Command::new("unshare");
    wrapped.args(["--mount", "--propagation", "private", "sh", "-c", r#"mount --bind "$0" /run && exec "$@""#]);
    wrapped.arg(run_dir).arg(command.get_program()).args(command.get_args());
    wrapped.stdout(std::process::Stdio::null());
    wrapped
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_cluster_config_from_the_service_account_mount_and_service_env_works() {
    let cp = ControlPlane::shared().expect("kube-apiserver, etcd and kubectl: run `make control-plane`");
    let admin = cp.admin_client().await;
    let ns = cp.namespace("in-cluster").await;
    let sa: k8s_openapi::api::core::v1::ServiceAccount =
        serde_json::from_value(serde_json::json!({"metadata": {"name": "kubewasm"}})).unwrap();
    Api::namespaced(admin.clone(), &ns).create(&PostParams::default(), &sa).await.unwrap();
    let binding: ClusterRoleBinding = serde_json::from_value(serde_json::json!({
        "metadata": {"name": format!("kubewasm-in-cluster-{ns}")},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"kind": "ServiceAccount", "name": "kubewasm", "namespace": ns}]}))
    .unwrap();
    Api::<ClusterRoleBinding>::all(admin.clone()).create(&PostParams::default(), &binding).await.unwrap();

    // What the kubelet mounts: token, CA bundle, namespace.
    let run_dir = tempfile::tempdir().unwrap();
    let sa_dir: PathBuf = run_dir.path().join("secrets/kubernetes.io/serviceaccount");
    std::fs::create_dir_all(&sa_dir).unwrap();
    let token = service_account_token(&admin, &ns, "kubewasm").await;
    std::fs::write(sa_dir.join("token"), token).unwrap();
    std::fs::copy(cp.dir().join("ca.crt"), sa_dir.join("ca.crt")).unwrap();
    std::fs::write(sa_dir.join("namespace"), &ns).unwrap();

    let plugins = tempfile::tempdir().unwrap();
    common::install_plugin(plugins.path(), "namespace-defaults", "namespace_defaults.wasm", "{}\n");
    let mut command = kubewasm_run(plugins.path());
    // No kubeconfig anywhere (empty HOME, no KUBECONFIG): kube-rs falls back to in-cluster.
    let home = tempfile::tempdir().unwrap();
    command.args(["--wasm-plugins", "false", "--leader-elect", "--compile-cache"]).arg(test_compile_cache());
    let mut wrapped = in_pod_mounts(run_dir.path(), &command);
    let port = cp.admin_config().cluster_url.port_u16().expect("the apiserver URL has a port");
    wrapped.env_clear().env("PATH", std::env::var_os("PATH").unwrap_or_default()).env("HOME", home.path());
    wrapped.env("KUBERNETES_SERVICE_HOST", "127.0.0.1").env("KUBERNETES_SERVICE_PORT", port.to_string());
    let mut host = HostProcess::spawn(wrapped);
    host.ready(CONVERGE).await;

    // The Lease lands in the namespace read from the mounted namespace file.
    let leases = Api::<Lease>::namespaced(admin.clone(), &ns);
    eventually("the Lease in the service account's namespace", CONVERGE, || async {
        leases.get_opt("kubewasm").await.unwrap()?.spec?.holder_identity
    })
    .await;
    let target = format!("{ns}-target");
    let namespaces = Api::<k8s_openapi::api::core::v1::Namespace>::all(admin.clone());
    let target_ns = serde_json::from_value(serde_json::json!({"metadata": {"name": target}})).unwrap();
    namespaces.create(&PostParams::default(), &target_ns).await.unwrap();
    let quotas = Api::<k8s_openapi::api::core::v1::ResourceQuota>::namespaced(admin.clone(), &target);
    eventually("the quota, written with the mounted token", CONVERGE, || async {
        quotas.get_opt("default-quota").await.unwrap()
    })
    .await;
    host.signal("-TERM");
    assert!(host.exited(Duration::from_secs(60)).await.success());
}
