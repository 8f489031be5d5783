//! The `WasmPlugin` custom resource (`kubewasm.dev/v1alpha1`, cluster-scoped): a plugin's module
//! source, grants, limits and settings, and the host's report of what serves.
//!
//! The CRD YAML in `deploy/crds/wasmplugin.yaml` is generated from these types
//! (`kubewasm crd`); a test fails when the two drift apart.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResource;
use kube::CustomResourceExt as _;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::plugin::PluginConfig;
use crate::plugin::grants::GrantConfig;
use crate::plugin::limits::Limits;

/// A reconcile plugin the host loads, swaps and unloads as this object changes.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "kubewasm.dev",
    version = "v1alpha1",
    kind = "WasmPlugin",
    plural = "wasmplugins",
    shortname = "wp",
    status = "WasmPluginStatus",
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Revision","type":"integer","jsonPath":".status.revision"}"#,
    printcolumn = r#"{"name":"Reason","type":"string","jsonPath":".status.conditions[?(@.type==\"Degraded\")].reason"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WasmPluginSpec {
    /// Where the component comes from.
    pub module: ModuleSource,
    /// Access beyond the defaults (`Kind.group` names, e.g. `Deployment.apps`).
    #[serde(default)]
    pub grants: GrantConfig,
    /// Sandbox limits; unset fields keep the host defaults.
    #[serde(default)]
    pub limits: Limits,
    /// Settings handed to the plugin as JSON through `config.settings`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_json")]
    pub settings: Option<Value>,
    /// A JSON Schema the settings must satisfy: a version whose settings do not is rejected
    /// (`Degraded`, reason `InvalidSettings`) and the version before keeps serving.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_json")]
    pub settings_schema: Option<Value>,
    /// Concurrent reconciles; overrides the plugin's own `max-concurrent`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_concurrent: Option<u32>,
    /// Stop serving (the plugin is unloaded) without deleting the object.
    #[serde(default)]
    pub paused: bool,
}

fn any_json(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({ "type": "object", "x-kubernetes-preserve-unknown-fields": true })
}

/// Where the component comes from: exactly one of `configMap` and `url`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "has(self.configMap) != has(self.url)",
    "message": "set exactly one of configMap and url"
}]))]
pub struct ModuleSource {
    /// A key of a ConfigMap in the host's namespace whose `binaryData` holds the component.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map: Option<ConfigMapModule>,
    /// An HTTP(S) URL, pinned by the component's sha256.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<UrlModule>,
}

/// A component fetched over HTTP(S).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UrlModule {
    /// `https://…` (or `http://…`); redirects are followed.
    pub url: String,
    /// Lowercase hex sha256 the downloaded bytes must have.
    #[schemars(regex(pattern = r"^[0-9a-f]{64}$"))]
    pub sha256: String,
}

/// A component in a ConfigMap.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ConfigMapModule {
    /// ConfigMap name (in the host's namespace).
    pub name: String,
    /// Key in its `binaryData`.
    pub key: String,
    /// Lowercase hex sha256 the component must have (recommended): a ConfigMap whose bytes
    /// differ is refused and the version serving before keeps serving.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[0-9a-f]{64}$"))]
    pub sha256: Option<String>,
}

/// What the host reports.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WasmPluginStatus {
    /// `Loaded`, `Ready` and `Degraded`; on a sharded host also `Sharded` (`True`: split by
    /// namespace; `False`, reason `ClusterScopedKind`: one replica reconciles every key).
    #[serde(default)]
    pub conditions: Vec<Condition>,
    /// The generation this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// sha256 of the component serving now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loaded_sha256: Option<String>,
    /// Revision serving now (1, 2, … per load in this host process).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<u64>,
    /// Why the latest spec is not serving, if it is not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}

/// A status condition (the shape of `metav1.Condition`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// `Loaded`, `Ready`, `Degraded` or `Sharded`.
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// CamelCase reason.
    pub reason: String,
    /// Human-readable detail.
    #[serde(default)]
    pub message: String,
    /// When `status` last changed (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<String>,
    /// The generation the condition was set for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

impl WasmPluginSpec {
    /// The operator configuration this spec asks for.
    pub fn plugin_config(&self) -> PluginConfig {
        PluginConfig {
            grants: self.grants.clone(),
            limits: self.limits.clone(),
            settings: self.settings.clone(),
            settings_schema: self.settings_schema.clone(),
            max_concurrent: self.max_concurrent,
            // Not in the CRD yet: WasmPlugins retry with client-go's defaults.
            rate_limiter: Default::default(),
        }
    }
}

/// The CRD. Defaults are left out of the schema: the API server would store them in every
/// object, freezing today's host defaults into it; unset limits follow the host instead.
pub fn crd() -> CustomResourceDefinition {
    fn strip_defaults(v: &mut Value) {
        match v {
            Value::Object(map) => {
                map.remove("default");
                map.values_mut().for_each(strip_defaults);
            }
            Value::Array(items) => items.iter_mut().for_each(strip_defaults),
            _ => {}
        }
    }
    let mut value = serde_json::to_value(WasmPlugin::crd()).expect("a CRD serializes");
    for version in value.pointer_mut("/spec/versions").and_then(Value::as_array_mut).into_iter().flatten() {
        if let Some(schema) = version.pointer_mut("/schema/openAPIV3Schema") {
            strip_defaults(schema);
        }
    }
    serde_json::from_value(value).expect("still a CRD")
}

/// The CRD as YAML, as `deploy/crds/wasmplugin.yaml` holds it.
pub fn crd_yaml() -> String {
    let header = "# Generated by `kubewasm crd` from host/src/hotload/wasmplugin.rs; do not edit.\n";
    format!("{header}{}", serde_yaml::to_string(&crd()).expect("a CRD serializes"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_committed_crd_yaml_matches_the_rust_types() {
        let committed = include_str!("../../../deploy/crds/wasmplugin.yaml");
        assert!(
            committed == crd_yaml(),
            "deploy/crds/wasmplugin.yaml is stale: run `cargo run -p kubewasm -- crd > deploy/crds/wasmplugin.yaml`"
        );
    }

    #[test]
    fn a_spec_parses_from_yaml_with_defaults_and_rejects_unknown_fields() {
        let spec: WasmPluginSpec = serde_yaml::from_str(
            "module:\n  configMap: {name: m, key: plugin.wasm}\ngrants:\n  write: [Deployment.apps]\nsettings: {a: 1}\n",
        )
        .unwrap();
        assert_eq!(spec.module.config_map.as_ref().unwrap().key, "plugin.wasm");
        assert_eq!(spec.module.config_map.as_ref().unwrap().sha256, None, "pinning is optional");
        assert_eq!(spec.plugin_config().grants.write.len(), 1);
        assert_eq!(spec.plugin_config().limits, Limits::default());
        assert!(!spec.paused);
        let err =
            serde_yaml::from_str::<WasmPluginSpec>("module: {configMap: {name: m, key: k}}\nlimitz: {}\n").unwrap_err();
        assert!(err.to_string().contains("limitz"), "{err}");
    }

    #[test]
    fn the_crd_is_cluster_scoped_with_a_status_subresource() {
        let crd = crd();
        assert_eq!(crd.spec.scope, "Cluster");
        let version = &crd.spec.versions[0];
        assert!(version.subresources.as_ref().and_then(|s| s.status.as_ref()).is_some());
        let yaml = crd_yaml();
        assert!(yaml.contains("x-kubernetes-preserve-unknown-fields"), "{yaml}");
        assert!(yaml.contains("has(self.configMap) != has(self.url)"), "{yaml}");
        assert!(yaml.contains("^[0-9a-f]{64}$"), "{yaml}");
        assert!(!yaml.contains("default:"), "host defaults must not be frozen into objects: {yaml}");
    }
}
