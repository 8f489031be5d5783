//! deploy/helm/kubewasm with the real `helm`: it lints; it renders the objects kustomize renders
//! for deploy/overlays/examples and deploy/overlays/sharded (what may differ is listed in
//! [`ALLOWED`]); the Prometheus Operator's objects render only where their CRDs are served; and
//! on a real kube-apiserver it installs, the example plugins converge as their identities under
//! its admission policy, it upgrades, and it uninstalls without leaving an object behind.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, ResourceQuota, Secret};
use kube::api::{Api, PostParams};
use kubewasm_testenv::{ControlPlane, Registry};
use serde_json::{Value, json};

use crate::common::examples::{self, CONVERGE, crd_established, deploy_dir};
use crate::common::process::{ANY_PORT, HostProcess, service_account_token, token_kubeconfig};
use crate::common::{eventually, registry, run_ok, test_compile_cache};
use crate::{chart_dir, chart_file, helm, objects};

/// The release and namespace every test here uses: the names deploy/base has.
const RELEASE: &str = "kubewasm";
const NAMESPACE: &str = "kubewasm-system";

/// What may differ between the chart and kustomize, and why:
/// - labels: Helm's own (`helm.sh/chart`, `app.kubernetes.io/managed-by`, `…/instance`,
///   `…/version`) on every object and selector, and `app.kubernetes.io/part-of` on the objects
///   kustomize's overlays add (the base labels only its own);
/// - the Namespace: kustomize makes it, Helm installs into the release namespace
///   (`--create-namespace`);
/// - the examples' own CRD (ConfigMapSync), which the examples overlay installs and the chart
///   does not (a plugin's CRDs are its own);
/// - names: kustomize's generated `kubewasm-example-plugins-<hash>` is the chart's
///   `kubewasm-plugin-configs` (its volume `example-configs` is `plugin-configs`), and the
///   ClusterRole(Binding) of what the caches read, `kubewasm-examples`, is
///   `kubewasm-plugin-reads`;
/// - the pod template's `checksum/plugin-configs` annotation: the chart rolls the pods on a
///   config change by it, kustomize by renaming its generated ConfigMap;
/// - a plugin config's text: kustomize copies the file, the chart writes the values as YAML
///   (compared parsed);
/// - the order of volumes and volume mounts: Kubernetes keys them by name and mount path, and
///   kustomize's patch puts the overlay's first;
/// - the WasmPlugin CRD's `part-of` label: Helm installs `crds/` as it is, untemplated (the file
///   is deploy/crds/wasmplugin.yaml, which `kubewasm crd` generates), kustomize labels it.
const ALLOWED: &[&str] =
    &["labels", "Namespace", "examples CRD", "generated names", "checksum", "config text", "volume order", "CRD label"];

/// Label keys Helm may add to a label map that kustomize's lacks.
const HELM_LABELS: &[&str] = &[
    "helm.sh/chart",
    "app.kubernetes.io/managed-by",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
    "app.kubernetes.io/part-of",
];

/// kustomize's name → the chart's.
fn chart_name(name: &str) -> String {
    match name {
        "kubewasm-examples" => "kubewasm-plugin-reads".into(),
        "example-configs" => "plugin-configs".into(),
        n if n.starts_with("kubewasm-example-plugins-") => "kubewasm-plugin-configs".into(),
        n => n.into(),
    }
}

fn key(object: &Value) -> String {
    let field = |p: &str| object.pointer(p).and_then(Value::as_str).unwrap_or("").to_owned();
    format!("{}/{}/{}", field("/kind"), field("/metadata/namespace"), field("/metadata/name"))
}

/// kustomize's object with the chart's names and without what only kustomize makes.
fn as_chart_names(mut object: Value) -> Value {
    fn rename(value: &mut Value) {
        match value {
            Value::Object(map) => {
                for (k, v) in map.iter_mut() {
                    if let (true, Value::String(s)) = (k == "name" || k == "claimName", &mut *v) {
                        *s = chart_name(s);
                    }
                    rename(v);
                }
            }
            Value::Array(items) => items.iter_mut().for_each(rename),
            _ => {}
        }
    }
    rename(&mut object);
    object
}

/// The chart's object without what only the chart has: the checksum annotation that rolls
/// the pods on a config change.
fn without_checksum(mut object: Value) -> Value {
    if let Some(template) = object.pointer_mut("/spec/template/metadata").and_then(Value::as_object_mut)
        && let Some(Value::Object(annotations)) = template.get_mut("annotations")
    {
        annotations.remove("checksum/plugin-configs");
        if annotations.is_empty() {
            template.remove("annotations");
        }
    }
    object
}

/// kustomize's object without what only kustomize has: the `part-of` label on a CRD.
fn without_crd_label(mut object: Value) -> Value {
    if object["kind"] == "CustomResourceDefinition" {
        if let Some(labels) = object.pointer_mut("/metadata/labels").and_then(Value::as_object_mut) {
            labels.remove("app.kubernetes.io/part-of");
        }
        if object.pointer("/metadata/labels").and_then(Value::as_object).is_some_and(|l| l.is_empty()) {
            object["metadata"].as_object_mut().unwrap().remove("labels");
        }
    }
    object
}

/// Compares `chart` with `kustomize` (both one object), where label maps may hold
/// [`HELM_LABELS`] that kustomize's lack and a ConfigMap's data are YAML compared parsed.
/// Returns the paths that differ.
fn differences(path: &str, chart: &Value, kustomize: &Value, out: &mut Vec<String>) {
    let label_map = path.ends_with("/labels")
        || path.ends_with("/matchLabels")
        || (path.starts_with("Service/") && path.ends_with("/spec/selector"));
    match (chart, kustomize) {
        (Value::Object(c), Value::Object(k)) => {
            let keys: BTreeSet<&String> = c.keys().chain(k.keys()).collect();
            for name in keys {
                let sub = format!("{path}/{name}");
                match (c.get(name), k.get(name)) {
                    (Some(_), None) if label_map && HELM_LABELS.contains(&name.as_str()) => {}
                    // An object kustomize labels nothing is compared as labelled with nothing.
                    (Some(c), None) if name == "labels" => differences(&sub, c, &json!({}), out),
                    (Some(c), Some(k)) => differences(&sub, c, k, out),
                    (c, k) => out.push(format!("{sub}: chart {c:?}, kustomize {k:?}")),
                }
            }
        }
        (Value::Array(c), Value::Array(k)) if c.len() == k.len() => {
            let (mut c, mut k) = (c.clone(), k.clone());
            if path.ends_with("/volumes") || path.ends_with("/volumeMounts") {
                let by_key = |v: &Value| format!("{}\0{}", v["name"], v["mountPath"]);
                c.sort_by_key(by_key);
                k.sort_by_key(by_key);
            }
            for (i, (c, k)) in c.iter().zip(&k).enumerate() {
                differences(&format!("{path}/{i}"), c, k, out);
            }
        }
        (Value::String(c), Value::String(k)) if path.starts_with("ConfigMap") && path.contains("/data/") => {
            let parse = |s: &str| serde_yaml::from_str::<Value>(s).ok();
            if parse(c) != parse(k) {
                out.push(format!("{path}: chart {c:?}, kustomize {k:?} (parsed)"));
            }
        }
        // kustomize writes the CRD's `minimum: 0.0` as 0, Helm leaves it as the file has it.
        (Value::Number(c), Value::Number(k)) if c.as_f64() == k.as_f64() => {}
        (c, k) if c != k => out.push(format!("{path}: chart {c}, kustomize {k}")),
        _ => {}
    }
}

/// `helm template` of the chart as release [`RELEASE`] in [`NAMESPACE`] with the CRD, with `args`.
fn template(home: &Path, args: &[&str]) -> Option<String> {
    let mut command = helm(home)?;
    command.args(["template", RELEASE]).arg(chart_dir()).args(["--namespace", NAMESPACE, "--include-crds"]);
    command.args(args);
    Some(run_ok(command))
}

fn values(file: &str) -> String {
    chart_dir().join("ci").join(file).display().to_string()
}

#[test]
fn the_charts_crd_is_the_one_kubewasm_crd_generates_byte_for_byte() {
    // A copy, not a symlink: Helm logs every symlink it follows on every command.
    let generated = std::fs::read_to_string(deploy_dir().join("crds/wasmplugin.yaml")).unwrap();
    let chart = std::fs::read_to_string(chart_dir().join("crds/wasmplugin.yaml")).unwrap();
    assert!(chart == generated, "stale: cp deploy/crds/wasmplugin.yaml deploy/helm/kubewasm/crds/wasmplugin.yaml");
}

#[test]
fn helm_lint_passes_strictly_with_the_default_examples_and_sharded_values() {
    let home = tempfile::tempdir().unwrap();
    let Some(mut lint) = helm(home.path()) else { return };
    lint.args(["lint", "--strict"]).arg(chart_dir());
    lint.args(["--values", &values("examples-values.yaml"), "--values", &values("sharded-values.yaml")]);
    let out = run_ok(lint);
    assert!(out.contains("1 chart(s) linted, 0 chart(s) failed"), "{out}");
    let mut defaults = helm(home.path()).unwrap();
    defaults.args(["lint", "--strict"]).arg(chart_dir());
    assert!(run_ok(defaults).contains("0 chart(s) failed"));
    // A wrong mode is refused at render time, not turned into a Deployment without a mode.
    let mut wrong = helm(home.path()).unwrap();
    wrong.args(["template", RELEASE]).arg(chart_dir()).args(["--set", "mode=both"]);
    let out = wrong.output().unwrap();
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("mode must be leader or sharded"));
}

#[test]
fn the_chart_renders_the_objects_kustomize_renders_for_the_examples_and_sharded_overlays() {
    let home = tempfile::tempdir().unwrap();
    let Some(cp) = ControlPlane::shared() else { return };
    for (overlay, value_files) in
        [("examples", vec!["examples-values.yaml"]), ("sharded", vec!["examples-values.yaml", "sharded-values.yaml"])]
    {
        let mut args = Vec::new();
        for file in &value_files {
            args.extend(["--values".to_owned(), values(file)]);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let Some(rendered) = template(home.path(), &args) else { return };
        let mut kustomize = std::process::Command::new(cp.kubectl_path());
        kustomize.arg("kustomize").arg(deploy_dir().join("overlays").join(overlay));
        let kustomized = run_ok(kustomize);

        let chart: BTreeMap<String, Value> =
            objects(&rendered).into_iter().map(without_checksum).map(|o| (key(&o), o)).collect();
        let only_kustomize = |o: &Value| {
            let kind = o["kind"].as_str().unwrap_or("");
            kind == "Namespace"
                || (kind == "CustomResourceDefinition"
                    && o["metadata"]["name"] == "configmapsyncs.examples.kubewasm.dev")
        };
        let kustomize: BTreeMap<String, Value> = objects(&kustomized)
            .into_iter()
            .filter(|o| !only_kustomize(o))
            .map(as_chart_names)
            .map(without_crd_label)
            .map(|o| (key(&o), o))
            .collect();
        let (chart_keys, kustomize_keys): (BTreeSet<_>, BTreeSet<_>) =
            (chart.keys().collect(), kustomize.keys().collect());
        assert_eq!(chart_keys, kustomize_keys, "{overlay}: the chart and kustomize make different objects");
        assert!(chart.len() > 25, "{overlay}: only {} objects rendered", chart.len());
        let mut diffs = Vec::new();
        for (name, object) in &chart {
            differences(name, object, &kustomize[name], &mut diffs);
        }
        assert!(
            diffs.is_empty(),
            "{overlay}: the chart differs from kustomize beyond {ALLOWED:?}:\n{}",
            diffs.join("\n")
        );
    }
}

#[test]
fn the_prometheus_operator_objects_render_only_where_their_crds_are_served_and_the_dashboard_when_asked() {
    let home = tempfile::tempdir().unwrap();
    let kinds = |rendered: &str| -> BTreeSet<String> {
        objects(rendered).iter().map(|o| o["kind"].as_str().unwrap_or("").to_owned()).collect()
    };
    let Some(plain) = template(home.path(), &[]) else { return };
    assert!(!kinds(&plain).contains("ServiceMonitor") && !kinds(&plain).contains("PrometheusRule"), "{plain}");
    let operator = [
        "--api-versions",
        "monitoring.coreos.com/v1/ServiceMonitor",
        "--api-versions",
        "monitoring.coreos.com/v1/PrometheusRule",
        "--set",
        "grafanaDashboard.enabled=true",
    ];
    let rendered = template(home.path(), &operator).unwrap();
    let all = objects(&rendered);
    let find = |kind: &str, name: &str| {
        all.iter().find(|o| o["kind"] == kind && o["metadata"]["name"] == name).cloned().unwrap_or_else(|| {
            panic!("no {kind} {name} in:\n{rendered}");
        })
    };
    let monitor = find("ServiceMonitor", "kubewasm");
    let service = find("Service", "kubewasm-metrics");
    for (label, value) in monitor["spec"]["selector"]["matchLabels"].as_object().unwrap() {
        assert_eq!(&service["metadata"]["labels"][label], value, "the ServiceMonitor selects the metrics Service");
    }
    assert_eq!(monitor["spec"]["endpoints"][0]["port"], service["spec"]["ports"][0]["name"]);
    // The PrometheusRule is the plain rules file, group for group.
    let rules: Value =
        serde_yaml::from_str(&std::fs::read_to_string(chart_file("kubewasm.rules.yaml")).unwrap()).unwrap();
    assert_eq!(find("PrometheusRule", "kubewasm")["spec"]["groups"], rules["groups"]);
    let dashboard: Value =
        serde_json::from_str(&std::fs::read_to_string(chart_file("kubewasm-dashboard.json")).unwrap()).unwrap();
    let config_map = find("ConfigMap", "kubewasm-dashboard");
    let shipped: Value = serde_json::from_str(config_map["data"]["kubewasm.json"].as_str().unwrap()).unwrap();
    assert_eq!(shipped, dashboard);
    assert_eq!(config_map["metadata"]["labels"]["grafana_dashboard"], "1", "the sidecar's label");
}

#[test]
fn registry_values_render_a_mounted_ca_pull_secrets_signed_wasm_plugins_and_the_memory_budget() {
    let home = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let values = dir.path().join("values.yaml");
    let key = "-----BEGIN PUBLIC KEY-----\nMFkw\n-----END PUBLIC KEY-----\n";
    let given = json!({
        "pluginMemoryBudget": "268435456",
        "oci": {
            "caBundle": "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n",
            "pullSecrets": {"regcred": {"registry": "registry.example:5000", "username": "u", "password": "p"}},
            "requireSignature": true,
        },
        "wasmPlugins": {"namespace-defaults": {
            "oci": {"ref": "registry.example:5000/nd:v1", "pullSecret": "regcred", "signature": {"publicKey": key}},
            "grants": {"read": ["Namespace"]},
            "maxConcurrent": 2,
        }},
    });
    std::fs::write(&values, serde_yaml::to_string(&given).unwrap()).unwrap();
    let Some(rendered) = template(home.path(), &["--values", values.to_str().unwrap()]) else { return };
    let all = objects(&rendered);
    let find = |kind: &str, name: &str| {
        all.iter().find(|o| o["kind"] == kind && o["metadata"]["name"] == name).cloned().unwrap_or_else(|| {
            panic!("no {kind} {name} in:\n{rendered}");
        })
    };
    let decode = |v: &Value| {
        use base64::Engine as _;
        String::from_utf8(base64::engine::general_purpose::STANDARD.decode(v.as_str().unwrap()).unwrap()).unwrap()
    };
    let ca = find("Secret", "kubewasm-oci-ca");
    assert_eq!(decode(&ca["data"]["ca.crt"]), given["oci"]["caBundle"].as_str().unwrap());
    let pull = find("Secret", "regcred");
    assert_eq!(pull["type"], "kubernetes.io/dockerconfigjson");
    let config: Value = serde_json::from_str(&decode(&pull["data"][".dockerconfigjson"])).unwrap();
    assert_eq!(config["auths"]["registry.example:5000"]["username"], "u");
    assert_eq!(decode(&config["auths"]["registry.example:5000"]["auth"]), "u:p");

    let plugin = find("WasmPlugin", "namespace-defaults");
    assert_eq!(plugin["spec"]["module"]["oci"], given["wasmPlugins"]["namespace-defaults"]["oci"]);
    assert_eq!(plugin["spec"]["grants"], json!({"read": ["Namespace"]}));
    assert_eq!(plugin["spec"]["maxConcurrent"], 2);

    let deployment = find("Deployment", "kubewasm");
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    let env: BTreeMap<&str, &Value> =
        container["env"].as_array().unwrap().iter().map(|e| (e["name"].as_str().unwrap(), &e["value"])).collect();
    assert_eq!(env["KUBEWASM_PLUGIN_MEMORY_BUDGET"], "268435456");
    assert_eq!(env["KUBEWASM_OCI_REQUIRE_SIGNATURE"], "true");
    let ca_file = env["KUBEWASM_OCI_CA_FILE"].as_str().unwrap();
    let mount = container["volumeMounts"].as_array().unwrap().iter().find(|m| m["name"] == "oci-ca").unwrap();
    assert_eq!(Path::new(ca_file).parent().unwrap(), Path::new(mount["mountPath"].as_str().unwrap()));
    let volumes = deployment["spec"]["template"]["spec"]["volumes"].as_array().unwrap();
    assert!(volumes.iter().any(|v| v["name"] == "oci-ca" && v["secret"]["secretName"] == "kubewasm-oci-ca"));
}

/// Runs `helm <args>` against the control plane as its admin; returns stdout.
fn helm_on(cp: &ControlPlane, home: &Path, args: &[&str]) -> String {
    let mut command = helm(home).expect("helm was found before");
    command.args(args).arg("--kubeconfig").arg(cp.kubeconfig_path());
    run_ok(command)
}

/// `kubewasm run` as the chart's Deployment runs it: its container's args and environment (the
/// pod's namespace for `POD_NAMESPACE`), authenticated as the chart's ServiceAccount, with the
/// plugin files of the chart's ConfigMap and, when the chart holds one, its registry CA. The
/// paths of the pod (plugins, compile cache, CA, admin address) are given as flags, which win
/// over the environment. There is no kubelet: the test runs the pod's process.
async fn run_as_the_deployment(cp: &ControlPlane, admin: &kube::Client, work: &Path) -> HostProcess {
    let deployment = Api::<Deployment>::namespaced(admin.clone(), NAMESPACE).get(RELEASE).await.unwrap();
    let spec = deployment.spec.template.spec.unwrap();
    let container = &spec.containers[0];
    let service_account = spec.service_account_name.as_deref().unwrap();
    let token = service_account_token(admin, NAMESPACE, service_account).await;
    let kubeconfig = work.join("kubeconfig");
    let server = cp.admin_config().cluster_url.to_string();
    std::fs::write(&kubeconfig, token_kubeconfig(&server, &cp.dir().join("ca.crt"), &token)).unwrap();

    let plugins = work.join("plugins");
    let _ = std::fs::remove_dir_all(&plugins);
    std::fs::create_dir_all(&plugins).unwrap();
    let configs = Api::<ConfigMap>::namespaced(admin.clone(), NAMESPACE);
    if let Some(configs) = configs.get_opt(&format!("{RELEASE}-plugin-configs")).await.unwrap() {
        for (file, config) in configs.data.unwrap_or_default() {
            let name = file.strip_suffix(".yaml").unwrap();
            common_install(&plugins, name, &config);
        }
    }
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_kubewasm"));
    command.args(["--log", "warn", "run"]).args(container.args.iter().flatten());
    command.arg("--plugins").arg(&plugins).args(["--admin-addr", ANY_PORT]);
    command.arg("--kubeconfig").arg(&kubeconfig).arg("--compile-cache").arg(test_compile_cache());
    for var in container.env.iter().flatten() {
        let value = match (&var.value, &var.value_from) {
            (Some(value), _) => value.clone(),
            (None, Some(from)) if from.field_ref.as_ref().is_some_and(|f| f.field_path == "metadata.namespace") => {
                NAMESPACE.to_owned()
            }
            _ => panic!("an environment variable the test cannot give the host: {var:?}"),
        };
        command.env(&var.name, value);
    }
    let secrets = Api::<Secret>::namespaced(admin.clone(), NAMESPACE);
    if let Some(ca) = secrets.get_opt(&format!("{RELEASE}-oci-ca")).await.unwrap() {
        let ca_file = work.join("oci-ca.crt");
        std::fs::write(&ca_file, &ca.data.unwrap()["ca.crt"].0).unwrap();
        command.arg("--oci-ca-file").arg(ca_file);
    }
    command.stdout(std::process::Stdio::null());
    HostProcess::spawn(command)
}

/// Plugin file `name` (its built example component) with `config`.
fn common_install(dir: &Path, name: &str, config: &str) {
    crate::common::install_plugin_verbatim(dir, name, &format!("{}.wasm", name.replace('-', "_")), config);
}

/// Every object of the release's manifest still on the server (`kind/name` lines).
fn left_of(cp: &ControlPlane, manifest: &Path) -> String {
    let mut get = cp.kubectl();
    get.args(["get", "--ignore-not-found", "-o", "name", "-f"]).arg(manifest);
    run_ok(get)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm_install_converges_the_examples_as_their_identities_under_the_policy_and_upgrade_and_uninstall_leave_nothing()
 {
    let Some(cp) = ControlPlane::shared() else { return };
    let home = tempfile::tempdir().unwrap();
    if helm(home.path()).is_none() {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let admin = cp.admin_client().await;
    // The namespace as an operator makes it for the examples (the overlay's patch): opted out of
    // namespace-defaults, whose quota would otherwise be refused there by the policy.
    examples::create_namespace(&admin, NAMESPACE, json!({"kubewasm.dev/no-defaults": "true"})).await;
    let mut crds = cp.kubectl();
    crds.args(["apply", "--server-side", "-k"]).arg(deploy_dir().join("crds/examples"));
    run_ok(crds);
    crd_established(&admin, "configmapsyncs.examples.kubewasm.dev").await;

    // With the harness registry (`make registry`), namespace-defaults is a WasmPlugin of the
    // chart pulled from it: signed, pinned, with the chart's pull Secret and CA.
    let registry = Registry::start_or_skip().await;
    let mut given = json!({});
    let pushed = match &registry {
        Some(registry) => {
            let (reference, digest) = registry::push_example(registry, "namespace-defaults").await;
            let key = kubewasm_host::hotload::oci::signature::SigningKey::generate();
            let puller = registry::puller(registry);
            puller.push_signature(&reference, &digest, &key, &registry::auth()).await.unwrap();
            let mut spec: Value = serde_yaml::from_str(&examples::example_config("namespace-defaults")).unwrap();
            spec["oci"] = json!({
                "ref": reference, "digest": digest, "pullSecret": registry::PULL_SECRET,
                "signature": {"publicKey": key.public_key().to_pem()},
            });
            given = json!({
                "pluginFiles": {"configs": {"namespace-defaults": null}},
                "wasmPlugins": {"namespace-defaults": spec},
                "oci": {
                    "caBundle": registry.ca_pem(),
                    "requireSignature": true,
                    "pullSecrets": {registry::PULL_SECRET: {
                        "registry": registry.host(),
                        "username": kubewasm_testenv::REGISTRY_USER,
                        "password": kubewasm_testenv::REGISTRY_PASSWORD,
                    }},
                },
            });
            Some(digest)
        }
        None => None,
    };
    let extra = work.path().join("values.yaml");
    std::fs::write(&extra, serde_yaml::to_string(&given).unwrap()).unwrap();
    let (examples_values, extra) = (values("examples-values.yaml"), extra.display().to_string());
    let chart = chart_dir().display().to_string();
    let install =
        ["install", RELEASE, &chart, "--namespace", NAMESPACE, "--values", &examples_values, "--values", &extra];
    let out = helm_on(&cp, home.path(), &install);
    assert!(out.contains("STATUS: deployed"), "{out}");

    let mut host = run_as_the_deployment(&cp, &admin, work.path()).await;
    host.ready(CONVERGE).await;
    eventually("the host leads", CONVERGE, || async {
        host.metric("leader_election_master_status", &[("name", RELEASE)]).filter(|v| *v == 1.0)
    })
    .await;
    examples::all_converge(&admin, "helm").await;
    if let Some(digest) = &pushed {
        eventually("the chart's WasmPlugin Ready from the registry, signed", CONVERGE, || {
            registry::serves_digest(&admin, "namespace-defaults", digest)
        })
        .await;
    }
    // The host's own ServiceAccount writes nothing: what converged was written as the plugins'
    // identities the chart made.
    let can = |user: &str, verb: &str, resource: &str| {
        let mut check = cp.kubectl();
        check.args(["auth", "can-i", verb, resource, "--all-namespaces", "--as", user]);
        String::from_utf8_lossy(&check.output().unwrap().stdout).trim().to_owned()
    };
    let prefix = format!("system:serviceaccount:{NAMESPACE}:");
    for (resource, plugin) in [
        ("resourcequotas", "namespace-defaults"),
        ("deployments.apps", "config-reloader"),
        ("configmaps", "configmap-sync"),
    ] {
        assert_eq!(can(&format!("{prefix}{RELEASE}"), "create", resource), "no", "the host may create {resource}");
        assert_eq!(can(&format!("{prefix}kubewasm-plugin-{plugin}"), "create", resource), "yes", "{plugin}");
    }
    // The chart's admission policy: a plugin identity may not write in the host's namespace,
    // whatever its RBAC says.
    let identities = kubewasm_host::identity::Identities::host(admin.clone()).impersonating(NAMESPACE);
    let as_sync = Api::<ConfigMap>::namespaced(identities.client("configmap-sync"), NAMESPACE);
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "planted"}})).unwrap();
    let refused = eventually("configmap-sync refused in the host namespace", CONVERGE, || async {
        as_sync.create(&PostParams::default(), &cm).await.err()
    })
    .await;
    assert!(refused.to_string().contains("may not write in the host namespace kubewasm-system"), "{refused}");

    // Upgrade: namespace-defaults' quota grows, and the dashboard is provisioned.
    let before = Api::<Deployment>::namespaced(admin.clone(), NAMESPACE).get(RELEASE).await.unwrap();
    let quota = if pushed.is_some() {
        "wasmPlugins.namespace-defaults.settings.quota.pods=30"
    } else {
        "pluginFiles.configs.namespace-defaults.settings.quota.pods=30"
    };
    let mut upgrade = install.to_vec();
    upgrade[0] = "upgrade";
    upgrade.extend(["--set-string", quota, "--set", "grafanaDashboard.enabled=true"]);
    let out = helm_on(&cp, home.path(), &upgrade);
    assert!(out.contains("REVISION: 2"), "{out}");
    let configs = Api::<ConfigMap>::namespaced(admin.clone(), NAMESPACE);
    let dashboard = configs.get(&format!("{RELEASE}-dashboard")).await.unwrap();
    assert!(dashboard.data.unwrap()["kubewasm.json"].contains("\"uid\": \"kubewasm\""));
    if pushed.is_none() {
        // A changed plugin file rolls the pods (their template's checksum): the pod's process
        // restarts with the new config.
        let after = Api::<Deployment>::namespaced(admin.clone(), NAMESPACE).get(RELEASE).await.unwrap();
        let checksum = |d: &Deployment| {
            d.spec.template.metadata.as_ref().unwrap().annotations.as_ref().unwrap()["checksum/plugin-configs"].clone()
        };
        assert_ne!(checksum(&before), checksum(&after), "the pod template did not change with the config");
        drop(host);
        host = run_as_the_deployment(&cp, &admin, work.path()).await;
        host.ready(CONVERGE).await;
    }
    // A WasmPlugin's change is swapped in by the running host.
    let ns = "helm-upgraded";
    examples::create_namespace(&admin, ns, json!({})).await;
    let quotas = Api::<ResourceQuota>::namespaced(admin.clone(), ns);
    eventually("the upgraded quota in a new namespace", CONVERGE, || async {
        let quota = quotas.get_opt("default-quota").await.unwrap()?;
        (quota.spec?.hard?["pods"].0 == "30").then_some(())
    })
    .await;
    host.signal("-TERM");
    assert!(host.exited(Duration::from_secs(60)).await.success());

    // Uninstall: nothing of the release stays, of any kind it made.
    let manifest = work.path().join("manifest.yaml");
    std::fs::write(&manifest, helm_on(&cp, home.path(), &["get", "manifest", RELEASE, "--namespace", NAMESPACE]))
        .unwrap();
    let made: BTreeSet<String> = objects(&std::fs::read_to_string(&manifest).unwrap())
        .iter()
        .map(|o| o["kind"].as_str().unwrap().to_owned())
        .collect();
    if registry.is_some() {
        // Every kind the chart can make, but the Prometheus Operator's (not served here).
        let full = template(
            home.path(),
            &["--values", &examples_values, "--values", &extra, "--set", "grafanaDashboard.enabled=true"],
        )
        .unwrap();
        let kinds: BTreeSet<String> = objects(&full).iter().map(|o| o["kind"].as_str().unwrap().to_owned()).collect();
        let kinds: BTreeSet<String> = kinds.into_iter().filter(|k| k != "CustomResourceDefinition").collect();
        assert_eq!(made, kinds, "the installed release lacks kinds the chart makes");
    }
    assert!(made.len() >= 10, "{made:?}");
    assert!(!left_of(&cp, &manifest).is_empty());
    let out = helm_on(&cp, home.path(), &["uninstall", RELEASE, "--namespace", NAMESPACE, "--wait"]);
    assert!(out.contains("uninstalled"), "{out}");
    let left = left_of(&cp, &manifest);
    assert!(left.is_empty(), "left behind by helm uninstall:\n{left}");
    let resources: Vec<String> = made.iter().map(|kind| kind.to_lowercase()).collect();
    let mut labelled = cp.kubectl();
    labelled.args(["get", &resources.join(","), "--all-namespaces", "-o", "name"]);
    labelled.args(["-l", &format!("app.kubernetes.io/instance={RELEASE}")]);
    let left = run_ok(labelled);
    assert!(left.trim().is_empty(), "objects labelled as the release's left behind:\n{left}");
    let mut release = cp.kubectl();
    release.args([
        "get",
        "secrets",
        "--namespace",
        NAMESPACE,
        "-o",
        "name",
        "-l",
        &format!("owner=helm,name={RELEASE}"),
    ]);
    assert!(run_ok(release).trim().is_empty(), "Helm's release records left behind");
    // Helm never deletes what crds/ installed (README, "Installing with Helm": the caveat).
    crd_established(&admin, "wasmplugins.kubewasm.dev").await;
}
