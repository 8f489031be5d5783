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
use crate::plugin::source::EngineRef;

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
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "!has(self.engine) || !has(self.module.url) && (!has(self.canary) || !has(self.canary.module) || !has(self.canary.module.url))",
        "message": "a plugin given as source (engine) comes from a ConfigMap or a registry (module.configMap, module.oci), not a URL"
    },
    {
        "rule": "has(self.engine) || (!has(self.module.configMap) || has(self.module.configMap.key)) && (!has(self.canary) || !has(self.canary.module) || !has(self.canary.module.configMap) || has(self.canary.module.configMap.key))",
        "message": "a component in a ConfigMap is one key of its binaryData: set module.configMap.key"
    }
]))]
pub struct WasmPluginSpec {
    /// Where the component comes from; for a plugin given as source (`engine` set), the
    /// ConfigMap of its source files or the source artifact `kubewasm push` made of them.
    pub module: ModuleSource,
    /// The language engine the plugin's source runs on, `<language>@<major>.<minor>` of its SDK
    /// (`python@0.3`); the host refuses a version whose engine it does not carry. Unset: the
    /// module is a component.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "engine_schema")]
    pub engine: Option<EngineRef>,
    /// The module a source plugin's engine imports; unset: its only file's (a source of several
    /// files names it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entry: Option<String>,
    /// What the operator approves the plugin to read and write, kind by kind (`Kind.group`
    /// names, e.g. `Deployment.apps`).
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
    /// A dry-run canary: a candidate version that reconciles every key after the serving
    /// version, with its writes suppressed, and whose intended writes are compared with the
    /// serving version's (`status.canary`, Events, `kubewasm_canary_reconciles_total`).
    /// Promote it by moving its module and settings into the spec; drop it by removing it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub canary: Option<CanarySpec>,
}

/// The candidate version of a dry-run canary. It runs with the spec's grants and limits.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CanarySpec {
    /// The candidate's component; unset: `spec.module` (a candidate of other settings only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub module: Option<ModuleSource>,
    /// The candidate's settings; unset: `spec.settings`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_json")]
    pub settings: Option<Value>,
}

fn engine_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({ "type": "string", "pattern": "^[a-z0-9]+@[0-9]+\\.[0-9]+$" })
}

fn any_json(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({ "type": "object", "x-kubernetes-preserve-unknown-fields": true })
}

/// Where the component comes from: exactly one of `configMap`, `url` and `oci`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "[has(self.configMap), has(self.url), has(self.oci)].filter(x, x).size() == 1",
    "message": "set exactly one of configMap, url and oci"
}]))]
pub struct ModuleSource {
    /// A key of a ConfigMap in the host's namespace whose `binaryData` holds the component.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map: Option<ConfigMapModule>,
    /// An HTTP(S) URL, pinned by the component's sha256.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<UrlModule>,
    /// A wasm artifact in an OCI registry (recommended: no size limit of a ConfigMap, and
    /// pinned by digest).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oci: Option<OciModule>,
}

/// A component pushed to an OCI registry as a wasm artifact (`kubewasm push`): an image manifest
/// with config `application/vnd.wasm.config.v0+json` and one `application/wasm` layer.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OciModule {
    /// `registry/repository:tag`, or `registry/repository@sha256:…` (pinned).
    #[serde(rename = "ref")]
    pub reference: String,
    /// The manifest digest to pull (`sha256:…`), pinning a tag reference: the tag is then never
    /// resolved, and the registry's bytes must have this digest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^sha256:[0-9a-f]{64}$"))]
    pub digest: Option<String>,
    /// Seconds between resolutions of an unpinned tag (a new digest is swapped in); unset: the
    /// host's `--oci-refresh-seconds`. Never for a digest reference.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 10))]
    pub refresh_interval_seconds: Option<u64>,
    /// A `kubernetes.io/dockerconfigjson` Secret in the host's namespace with credentials for the
    /// registry; unset: anonymous pulls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pull_secret: Option<String>,
    /// The public key the module must be signed with (cosign's keyed signatures, checked offline:
    /// no transparency log or certificate authority). Unset: no signature is checked, unless the
    /// host runs with `--oci-require-signature`, which then refuses the module.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<OciSignature>,
}

/// Where the public key of an OCI module's signatures is: exactly one of `publicKey` and
/// `secret`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "has(self.publicKey) != has(self.secret)",
    "message": "set exactly one of publicKey and secret"
}]))]
pub struct OciSignature {
    /// The ECDSA P-256 public key in PEM (`-----BEGIN PUBLIC KEY-----`, as `cosign.pub` or
    /// `kubewasm generate-key` writes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub public_key: Option<String>,
    /// A Secret in the host's namespace whose `cosign.pub` key holds the PEM (as
    /// `cosign generate-key-pair k8s://<namespace>/<name>` makes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
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

/// A component in a ConfigMap, or a plugin's source files.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ConfigMapModule {
    /// ConfigMap name (in the host's namespace).
    pub name: String,
    /// A component: the key of its `binaryData` (required). A source: one file, the key of its
    /// `data`; unset: every key of `data` is a file of the source, named by its key
    /// (`kubectl create configmap NAME --from-file=plugin.py`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// Lowercase hex sha256 the component must have (recommended), or a source its version
    /// (`status.loadedSha256`): a ConfigMap whose bytes differ is refused and the version
    /// serving before keeps serving.
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
    /// The dry-run canary's findings while `spec.canary` is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub canary: Option<CanaryStatus>,
    /// For an OCI module: the reference, the digest it resolved to and when.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oci: Option<OciStatus>,
}

/// What an OCI module reference was last resolved to.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OciStatus {
    /// The reference resolved.
    #[serde(rename = "ref")]
    pub reference: String,
    /// The manifest digest it named (`sha256:…`).
    pub digest: String,
    /// When it was resolved (RFC 3339).
    pub resolved_at: String,
}

/// What the dry-run canary found (counts since its candidate was loaded by this host).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CanaryStatus {
    /// sha256 of the candidate running now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// Reconciles the candidate would have written alike.
    #[serde(default)]
    pub same: u64,
    /// Reconciles where its intended writes differ from the serving version's.
    #[serde(default)]
    pub differ: u64,
    /// Reconciles where it failed and the serving version did not.
    #[serde(default)]
    pub failed: u64,
    /// Comparisons skipped (the candidate lagged behind or its caches had not synced).
    #[serde(default)]
    pub skipped: u64,
    /// The latest difference found.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_difference: Option<CanaryDifference>,
    /// Why the latest candidate is not running (it did not load), if it is not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// Rights the plugin's ServiceAccount lacks for the candidate's grants, reviewed when it
    /// loaded: its requests needing them would be forbidden once it serves.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rbac_missing: Vec<String>,
}

/// One reconcile where the candidate would have written otherwise than the serving version.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CanaryDifference {
    /// The key (`namespace/name`, or `name`).
    pub key: String,
    /// `differ` or `failed`.
    pub result: String,
    /// A unified diff of both versions' writes as YAML (serving → candidate), or the
    /// candidate's error; at most 4 KiB.
    pub diff: String,
    /// When it was found (RFC 3339).
    pub time: String,
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
    /// Whether ConfigMap `name` (of the module namespace) holds the module or the canary's: a
    /// change to it is a change to this plugin.
    pub fn reads_config_map(&self, name: &str) -> bool {
        let canary = self.canary.as_ref().and_then(|c| c.module.as_ref());
        [Some(&self.module), canary]
            .into_iter()
            .flatten()
            .any(|m| m.config_map.as_ref().is_some_and(|c| c.name == name))
    }

    /// The configuration of the canary's candidate: the spec's, with the canary's settings.
    pub fn canary_config(&self) -> Option<PluginConfig> {
        let canary = self.canary.as_ref()?;
        let mut config = self.plugin_config();
        if canary.settings.is_some() {
            config.settings = canary.settings.clone();
        }
        Some(config)
    }

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
            // A WasmPlugin's canary is `spec.canary`.
            canary: None,
            // Not in the CRD yet: WasmPlugins follow the host's --elide-unchanged-writes.
            elide_unchanged_writes: None,
            engine: self.engine.clone(),
            entry: self.entry.clone(),
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
            strip_unknown_formats(schema);
        }
    }
    serde_json::from_value(value).expect("still a CRD")
}

/// Drops the formats of numbers the API server does not know: schemars names Rust's unsigned
/// types (`uint32`, `uint64`, `uint`), which kube-apiserver ignores with a warning on every
/// apply of the CRD; it knows `int32`, `int64`, `float` and `double` only
/// (k8s.io/apiextensions-apiserver `pkg/apiserver/validation/formats.go`). The `minimum: 0`
/// schemars writes beside them keeps the values unsigned.
fn strip_unknown_formats(v: &mut Value) {
    match v {
        Value::Object(map) => {
            let known: &[&str] = match map.get("type").and_then(Value::as_str) {
                Some("integer") => &["int32", "int64"],
                Some("number") => &["float", "double"],
                _ => &[],
            };
            let format = map.get("format").and_then(Value::as_str);
            if format.is_some_and(|f| !known.is_empty() && !known.contains(&f)) {
                map.remove("format");
            }
            map.values_mut().for_each(strip_unknown_formats);
        }
        Value::Array(items) => items.iter_mut().for_each(strip_unknown_formats),
        _ => {}
    }
}

/// The CRD as YAML, as `deploy/crds/wasmplugin.yaml` holds it.
pub fn crd_yaml() -> String {
    let header = "# Generated by `kubewasm crd` from crates/host/src/hotload/wasmplugin.rs; do not edit.\n";
    format!("{header}{}", serde_yaml::to_string(&crd()).expect("a CRD serializes"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_committed_crd_yaml_matches_the_rust_types() {
        let committed = include_str!("../../../../deploy/crds/wasmplugin.yaml");
        assert!(
            committed == crd_yaml(),
            "deploy/crds/wasmplugin.yaml is stale: run `cargo run -p kubewasm -- crd > deploy/crds/wasmplugin.yaml`"
        );
    }

    #[test]
    fn a_source_spec_names_its_engine_and_its_config_map_without_a_key() {
        let spec: WasmPluginSpec =
            serde_yaml::from_str("engine: python@0.3\nmodule: {configMap: {name: hello-py}}\n").unwrap();
        let config = spec.plugin_config();
        assert_eq!(config.engine, Some("python@0.3".parse().unwrap()), "the engine reaches the runtime");
        assert_eq!(spec.module.config_map.unwrap().key, None);
        let err = serde_yaml::from_str::<WasmPluginSpec>("engine: python\nmodule: {configMap: {name: m}}\n");
        assert!(err.unwrap_err().to_string().contains("python@0.3"), "an engine without its version is refused");
        let yaml = crd_yaml();
        for rule in
            ["a plugin given as source (engine) comes from a ConfigMap or a registry", "set module.configMap.key"]
        {
            assert!(yaml.contains(rule), "the API server refuses what the host would: {rule}");
        }
    }

    #[test]
    fn a_spec_parses_from_yaml_with_defaults_and_rejects_unknown_fields() {
        let spec: WasmPluginSpec = serde_yaml::from_str(
            "module:\n  configMap: {name: m, key: plugin.wasm}\ngrants:\n  write: [Deployment.apps]\nsettings: {a: 1}\n",
        )
        .unwrap();
        assert_eq!(spec.module.config_map.as_ref().unwrap().key.as_deref(), Some("plugin.wasm"));
        assert_eq!(spec.module.config_map.as_ref().unwrap().sha256, None, "pinning is optional");
        assert_eq!(spec.plugin_config().grants.write.len(), 1);
        assert_eq!(spec.plugin_config().limits, Limits::default());
        assert!(!spec.paused);
        assert_eq!(spec.canary_config(), None, "no canary unless asked for");
        let err =
            serde_yaml::from_str::<WasmPluginSpec>("module: {configMap: {name: m, key: k}}\nlimitz: {}\n").unwrap_err();
        assert!(err.to_string().contains("limitz"), "{err}");
    }

    #[test]
    fn a_canary_takes_the_specs_config_with_its_own_settings() {
        let spec: WasmPluginSpec = serde_yaml::from_str(
            "module: {configMap: {name: m, key: a}}\ngrants: {write: [ConfigMap]}\nsettings: {x: 1}\ncanary:\n  module: {configMap: {name: m, key: b}}\n  settings: {x: 2}\n",
        )
        .unwrap();
        let config = spec.canary_config().unwrap();
        assert_eq!(config.settings, Some(serde_json::json!({"x": 2})));
        assert_eq!(config.grants, spec.plugin_config().grants, "the serving version's grants");
        let same: WasmPluginSpec =
            serde_yaml::from_str("module: {configMap: {name: m, key: a}}\ncanary: {}\n").unwrap();
        assert_eq!(same.canary_config(), Some(same.plugin_config()), "an empty canary is the serving config");
        assert!(
            serde_yaml::from_str::<WasmPluginSpec>("module: {url: {url: u, sha256: s}}\ncanary: {modul: {}}\n")
                .is_err()
        );
    }

    #[test]
    fn a_spec_reads_the_config_map_of_its_module_and_the_one_of_its_canary() {
        let spec: WasmPluginSpec = serde_yaml::from_str(
            "engine: python@0.3\nmodule: {configMap: {name: serving}}\ncanary:\n  module: {configMap: {name: candidate}}\n",
        )
        .unwrap();
        assert!(spec.reads_config_map("serving") && spec.reads_config_map("candidate"));
        assert!(!spec.reads_config_map("other"));
        let settings_only: WasmPluginSpec =
            serde_yaml::from_str("module: {url: {url: u, sha256: s}}\ncanary: {settings: {x: 1}}\n").unwrap();
        assert!(!settings_only.reads_config_map("u"), "a module by URL reads no ConfigMap");
    }

    #[test]
    fn the_crd_is_cluster_scoped_with_a_status_subresource() {
        let crd = crd();
        assert_eq!(crd.spec.scope, "Cluster");
        let version = &crd.spec.versions[0];
        assert!(version.subresources.as_ref().and_then(|s| s.status.as_ref()).is_some());
        let yaml = crd_yaml();
        assert!(yaml.contains("x-kubernetes-preserve-unknown-fields"), "{yaml}");
        assert!(yaml.contains("[has(self.configMap), has(self.url), has(self.oci)]"), "{yaml}");
        assert!(yaml.contains("^[0-9a-f]{64}$"), "{yaml}");
        assert!(!yaml.contains("default:"), "host defaults must not be frozen into objects: {yaml}");
    }
}
