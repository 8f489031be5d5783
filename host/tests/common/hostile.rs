//! The hostile fixtures (`fixture-hostile`, contract 0.2, and `fixture-hostile-legacy`, 0.1) as
//! the attack tests install them, and what those tests read back: refused calls in the host's
//! metrics, Events a plugin reported, the host's own namespace.

use std::path::Path;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::events::v1::Event;
use kube::Client;
use kube::api::{Api, ListParams, PostParams};
use kubewasm_host::app::{App, PluginFile};
use serde_json::{Value, json};

use super::{install_plugin_verbatim, metric_value};

/// Kinds as the fixtures' settings write them.
pub fn config_map_kind() -> Value {
    json!({"group": "", "version": "v1", "kind": "ConfigMap"})
}

/// See [`config_map_kind`].
pub fn namespace_kind() -> Value {
    json!({"group": "", "version": "v1", "kind": "Namespace"})
}

/// See [`config_map_kind`].
pub fn lease_kind() -> Value {
    json!({"group": "coordination.k8s.io", "version": "v1", "kind": "Lease"})
}

/// See [`config_map_kind`].
pub fn deployment_kind() -> Value {
    json!({"group": "apps", "version": "v1", "kind": "Deployment"})
}

/// A `fixture-hostile` plugin file named `name` with `settings`, and `grants` (a YAML line, or
/// empty) besides the approval of every kind its registration asks for: the attacks are made by
/// a plugin its operator approved, and the host judges each call.
pub fn hostile(dir: &Path, name: &str, grants: &str, settings: Value) -> PluginFile {
    let kind = |k: &Value| match k["group"].as_str().unwrap_or("") {
        "" => k["kind"].as_str().unwrap().to_owned(),
        group => format!("{}.{group}", k["kind"].as_str().unwrap()),
    };
    let kinds = |key: &str| settings[key].as_array().map(|a| a.iter().map(kind).collect()).unwrap_or_default();
    let for_kind = if settings["for"].is_null() { "ConfigMap".to_owned() } else { kind(&settings["for"]) };
    let owns: Vec<String> = kinds("owns");
    let read = [vec![for_kind.clone()], owns.clone()].concat();
    let asked = json!({
        "read": read,
        "status": [for_kind],
        "own": owns,
        "write": kinds("writes"),
    });
    plugin_file(dir, name, "fixture_hostile.wasm", grants, asked, settings)
}

/// A `fixture-hostile-legacy` (contract 0.1) plugin file, as [`hostile`]: it reconciles
/// Namespaces and owns and watches ConfigMaps.
pub fn hostile_legacy(dir: &Path, name: &str, grants: &str, settings: Value) -> PluginFile {
    let asked = json!({"read": ["Namespace", "ConfigMap"], "status": ["Namespace"], "own": ["ConfigMap"]});
    plugin_file(dir, name, "fixture_hostile_legacy.wasm", grants, asked, settings)
}

fn plugin_file(dir: &Path, name: &str, built: &str, grants: &str, asked: Value, settings: Value) -> PluginFile {
    let config = super::approving(&format!("{grants}settings: {settings}\n"), asked);
    PluginFile {
        name: name.into(),
        wasm: Some(install_plugin_verbatim(dir, name, built, &config)),
        config: Some(dir.join(format!("{name}.yaml"))),
    }
}

/// An `apply` of a ConfigMap `name` beside the reconciled object, controlled by it: the last call
/// of an attack, whose result shows the reconcile made the calls before it.
pub fn marker(name: &str) -> Value {
    json!({"op": "apply", "kind": config_map_kind(), "namespace": "$trigger", "name": name,
           "controlled": true, "body": {"data": {"done": "yes"}}})
}

/// Calls of `function` by `plugin` the host refused as forbidden.
pub fn forbidden_calls(app: &App, plugin: &str, function: &str) -> f64 {
    calls(app, plugin, function, "forbidden")
}

/// Calls of `function` by `plugin` that ended as `result` (`ok`, `invalid`, `forbidden`, …).
pub fn calls(app: &App, plugin: &str, function: &str, result: &str) -> f64 {
    let text = prometheus::TextEncoder::new().encode_to_string(&app.registry().gather()).unwrap();
    let labels = [("plugin", plugin), ("function", function), ("result", result)];
    metric_value(&text, "kubewasm_plugin_host_calls_total", &labels).unwrap_or(0.0)
}

/// How many of `plugin`'s requests the host allowed and the API server refused as forbidden.
pub fn apiserver_forbidden(app: &App, plugin: &str) -> f64 {
    let text = prometheus::TextEncoder::new().encode_to_string(&app.registry().gather()).unwrap();
    metric_value(&text, "kubewasm_plugin_apiserver_forbidden_total", &[("plugin", plugin)]).unwrap_or(0.0)
}

/// Binds plugin `plugin`'s identity (`kubewasm-plugin-<plugin>` in `kubewasm-system`) to
/// `cluster-admin`, so that only admission stands between it and the API server.
pub async fn bind_cluster_admin(admin: &Client, plugin: &str) {
    let binding = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": format!("everything-{plugin}")},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"kind": "ServiceAccount", "name": format!("kubewasm-plugin-{plugin}"), "namespace": "kubewasm-system"}],
    });
    let bindings = Api::<k8s_openapi::api::rbac::v1::ClusterRoleBinding>::all(admin.clone());
    bindings.create(&PostParams::default(), &serde_json::from_value(binding).unwrap()).await.unwrap();
}

/// Events in `ns` reported by `kubewasm/<plugin>`.
pub async fn events_from(client: &Client, ns: &str, plugin: &str) -> Vec<Event> {
    let reporter = format!("kubewasm/{plugin}");
    let list = Api::<Event>::namespaced(client.clone(), ns).list(&ListParams::default()).await.unwrap();
    list.items.into_iter().filter(|e| e.reporting_controller.as_deref() == Some(reporter.as_str())).collect()
}

/// The note of an `AccessDenied` Event in `ns` reported by `kubewasm/<plugin>`, if there is one.
pub async fn access_denied(client: &Client, ns: &str, plugin: &str) -> Option<String> {
    let events = events_from(client, ns, plugin).await;
    events.into_iter().find(|e| e.reason.as_deref() == Some("AccessDenied")).map(|e| e.note.unwrap_or_default())
}

/// The host's own namespace outside a pod (`kubewasm_host::leader::DEFAULT_NAMESPACE`), created if
/// missing: writes into it must be refused by the host, not by the API server for want of it.
pub async fn host_namespace(client: &Client) -> &'static str {
    let name = kubewasm_host::leader::DEFAULT_NAMESPACE;
    let namespace: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    match Api::<Namespace>::all(client.clone()).create(&PostParams::default(), &namespace).await {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 409 => {}
        Err(e) => panic!("creating namespace {name}: {e}"),
    }
    name
}

/// What an attack changed or got through, collected so that one failure lists every breach.
#[derive(Default)]
pub struct Breaches(Vec<String>);

impl Breaches {
    /// Records `breach` unless the defence `held`.
    pub fn check(&mut self, held: bool, breach: impl FnOnce() -> String) {
        if !held {
            self.0.push(breach());
        }
    }

    /// Records a breach unless `plugin`'s calls of `function` were refused as forbidden at least
    /// `times` times.
    pub fn refused(&mut self, app: &App, plugin: &str, function: &str, times: f64) {
        let refused = forbidden_calls(app, plugin, function);
        self.check(refused >= times, || format!("{plugin}'s {function} refused {refused} times, not {times}"));
    }

    /// Panics listing every breach, if there is one.
    pub fn assert_none(self, attack: &str) {
        assert!(self.0.is_empty(), "{attack} got through:\n  {}", self.0.join("\n  "));
    }
}
