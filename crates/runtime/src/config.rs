//! A plugin's operator configuration: grants, limits, settings, concurrency.
//!
//! Read from `<name>.yaml` (or `.json`) beside `<name>.wasm` (or `<name>.py`, a plugin given as
//! source, whose config names its `engine`); later also the WasmPlugin spec.
//! Strict: unknown fields are errors, so a typo never silently drops a limit.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::grants::GrantConfig;
use super::limits::Limits;
use kubewasm_queue::rate_limiter::LimiterConfig;

/// Operator configuration of one plugin.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct PluginConfig {
    /// What the operator approves the plugin to read and write.
    pub grants: GrantConfig,
    /// Sandbox limits.
    pub limits: Limits,
    /// Settings handed to the plugin as JSON through `config.settings`.
    pub settings: Option<Value>,
    /// A JSON Schema the settings must satisfy (usually the plugin author's): a version whose
    /// settings do not is rejected at load, before it can replace the version serving.
    pub settings_schema: Option<Value>,
    /// Concurrent reconciles; overrides the plugin's own `max-concurrent`.
    pub max_concurrent: Option<u32>,
    /// Retry backoff of the plugin's keys (client-go's defaults). Read when the plugin's
    /// controller is made; a new version swapped in keeps its queue and limiter.
    pub rate_limiter: LimiterConfig,
    /// A dry-run canary of this plugin (plugin directory; a WasmPlugin has `spec.canary`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub canary: Option<CanaryConfig>,
    /// Answer applies that would change nothing from the cache instead of sending them (see the
    /// the book's "Writes that change nothing"); unset: the host's `--elide-unchanged-writes`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub elide_unchanged_writes: Option<bool>,
    /// The language engine a plugin given as source runs on, `<language>@<major>.<minor>` of
    /// its SDK (`python@0.3`); unset: the plugin is a component.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub engine: Option<super::source::EngineRef>,
    /// The module a source plugin's engine imports; unset: its only file's (a plugin of several
    /// files names it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub entry: Option<String>,
}

impl PluginConfig {
    /// Test builds only (feature `insecure-test-authorizer`): defaults, with every kind the
    /// plugin asks for approved ([`GrantConfig::approving_requests`]).
    #[cfg(feature = "insecure-test-authorizer")]
    pub fn approving_requests() -> Self {
        Self { grants: GrantConfig::approving_requests(), ..Self::default() }
    }
}

/// A plugin file's dry-run canary: a candidate version run beside the serving one with its
/// writes suppressed and compared (`kubewasm_canary_reconciles_total`, logs). It runs with the
/// plugin's grants and limits.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct CanaryConfig {
    /// The candidate's component, relative to the plugin directory; unset: the serving one.
    /// Keep it where the directory does not load it as a plugin of its own: a subdirectory
    /// (`canary/<name>.wasm`) or a hidden file (`.<name>.canary.wasm`).
    pub wasm: Option<std::path::PathBuf>,
    /// The candidate's settings; unset: the plugin's.
    pub settings: Option<Value>,
}

/// A configuration file that cannot be used. Its message is the parser's, said once: an error
/// chain (`{:#}`) would repeat a message this type also printed.
#[derive(Debug, thiserror::Error)]
#[error("invalid plugin configuration")]
pub struct ConfigError(#[source] pub serde_yaml::Error);

/// Settings that do not satisfy the settings schema, or a schema that is not one.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InvalidSettings {
    /// `settingsSchema` is not a valid JSON Schema.
    #[error("settingsSchema is not a valid JSON Schema: {0}")]
    Schema(String),
    /// The settings break the schema; one line per violation, with its JSON pointer.
    #[error("the settings do not match settingsSchema: {}", .0.join("; "))]
    Settings(Vec<String>),
}

/// The innermost causes of a validation error, as `/pointer: what is wrong`, the pointer naming
/// the offending field itself: a property the schema does not allow or requires is named by its
/// own pointer (`/sufix`), not by its parent object's (`/`).
fn leaf_problems(error: &boon::ValidationError<'_, '_>, out: &mut Vec<String>) {
    use boon::ErrorKind;
    if error.causes.is_empty() {
        let parent = error.instance_location.to_string();
        let at = |name: &str| format!("{parent}/{}", name.replace('~', "~0").replace('/', "~1"));
        match &error.kind {
            ErrorKind::AdditionalProperties { got } => {
                out.extend(got.iter().map(|name| format!("{}: not a setting the schema allows", at(name))));
            }
            ErrorKind::Required { want } => {
                out.extend(want.iter().map(|name| format!("{}: required, and missing", at(name))));
            }
            ErrorKind::Dependency { prop, missing } | ErrorKind::DependentRequired { prop, missing } => {
                let when = at(prop);
                out.extend(missing.iter().map(|name| format!("{}: required when {when} is set", at(name))));
            }
            kind => out.push(format!("{}: {kind}", if parent.is_empty() { "/" } else { &parent })),
        }
    }
    for cause in &error.causes {
        leaf_problems(cause, out);
    }
}

impl PluginConfig {
    /// Checks the settings (`{}` when absent) against `settingsSchema`, if there is one, with
    /// the `boon` crate (drafts 4 to 2020-12; the draft follows `$schema`, else 2020-12).
    pub fn check_settings(&self) -> Result<(), InvalidSettings> {
        let Some(schema) = &self.settings_schema else { return Ok(()) };
        const LOCATION: &str = "file:///kubewasm/settings-schema.json";
        let (mut schemas, mut compiler) = (boon::Schemas::new(), boon::Compiler::new());
        let not_a_schema = |e: boon::CompileError| InvalidSettings::Schema(e.to_string());
        compiler.add_resource(LOCATION, schema.clone()).map_err(not_a_schema)?;
        let index = compiler.compile(LOCATION, &mut schemas).map_err(not_a_schema)?;
        let settings = self.settings.clone().unwrap_or_else(|| Value::Object(Default::default()));
        let Err(error) = schemas.validate(&settings, index) else { return Ok(()) };
        let mut problems = Vec::new();
        leaf_problems(&error, &mut problems);
        if problems.is_empty() { Ok(()) } else { Err(InvalidSettings::Settings(problems)) }
    }

    /// Parses YAML (JSON is YAML too).
    pub fn from_yaml(text: &str) -> Result<Self, ConfigError> {
        if text.trim().is_empty() {
            return Ok(Self::default());
        }
        serde_yaml::from_str(text).map_err(ConfigError)
    }

    /// The settings as JSON bytes (`{}` when absent).
    pub fn settings_json(&self) -> Vec<u8> {
        self.settings.as_ref().map_or_else(|| b"{}".to_vec(), |v| v.to_string().into_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_config_file_parses_grants_limits_and_settings() {
        let c = PluginConfig::from_yaml(
            "grants:\n  read: [Secret, Deployment.apps]\nlimits:\n  deadlineMs: 500\nsettings:\n  optOutLabel: x\nmaxConcurrent: 4\n",
        )
        .unwrap();
        assert_eq!(c.grants.read.len(), 2);
        assert_eq!(c.limits.deadline_ms, 500);
        assert_eq!(c.settings_json(), br#"{"optOutLabel":"x"}"#.to_vec());
        assert_eq!(c.max_concurrent, Some(4));
    }

    #[test]
    fn a_misspelled_field_is_an_error_not_a_silent_default() {
        let err = anyhow::Error::new(PluginConfig::from_yaml("limitz: {}\n").unwrap_err());
        assert!(format!("{err:#}").contains("unknown field `limitz`"), "{err:#}");
        assert!(PluginConfig::from_yaml("grants:\n  read: [apps/v1]\n").is_err());
    }

    #[test]
    fn a_config_file_sets_the_retry_backoff() {
        let c = PluginConfig::from_yaml("rateLimiter:\n  maxDelayMs: 30000\n  qps: 50\n").unwrap();
        let expected = LimiterConfig { max_delay_ms: 30_000, qps: 50.0, ..LimiterConfig::default() };
        assert_eq!(c.rate_limiter, expected);
        assert!(PluginConfig::from_yaml("rateLimiter:\n  maxDelay: 30\n").is_err());
    }

    #[test]
    fn settings_that_break_the_schema_are_refused_with_where_and_why() {
        let c = PluginConfig::from_yaml(
            "settings: {quotaName: 7}\nsettingsSchema:\n  type: object\n  properties: {quotaName: {type: string}}\n  additionalProperties: false\n",
        )
        .unwrap();
        let err = c.check_settings().unwrap_err().to_string();
        assert!(err.contains("/quotaName: want string, but got number"), "{err}");
        let typo = PluginConfig { settings: Some(serde_json::json!({"quotaNmae": "q"})), ..c.clone() };
        assert!(typo.check_settings().unwrap_err().to_string().contains("quotaNmae"));
        let good = PluginConfig { settings: Some(serde_json::json!({"quotaName": "q"})), ..c };
        assert_eq!(good.check_settings(), Ok(()));
    }

    #[test]
    fn a_setting_the_schema_refuses_is_named_by_its_own_json_pointer() {
        let schema = "settingsSchema:\n  type: object\n  properties: {suffix: {type: string}, a: {type: object}}\n  \
                      additionalProperties: false\n  required: [mode]\n  dependentRequired: {suffix: [prefix]}\n";
        let c = PluginConfig::from_yaml(&format!("settings: {{sufix: x, suffix: y, a: {{}}}}\n{schema}")).unwrap();
        let err = c.check_settings().unwrap_err().to_string();
        assert!(err.contains("/sufix: not a setting the schema allows"), "{err}");
        assert!(err.contains("/mode: required, and missing"), "{err}");
        assert!(err.contains("/prefix: required when /suffix is set"), "{err}");
        assert!(!err.contains("/: "), "no problem is pinned on the whole object: {err}");
        let nested = "settings: {a: {b/c: 1}}\nsettingsSchema: {properties: {a: {additionalProperties: false}}}\n";
        let err = PluginConfig::from_yaml(nested).unwrap().check_settings().unwrap_err().to_string();
        assert!(err.contains("/a/b~1c: not a setting"), "a pointer escapes `/` as `~1`: {err}");
    }

    #[test]
    fn an_unknown_field_is_named_once_in_the_error_chain() {
        let err = anyhow::Error::new(PluginConfig::from_yaml("setings: {}\n").unwrap_err()).context("in p.yaml");
        let chain = format!("{err:#}");
        assert_eq!(chain.matches("unknown field `setings`").count(), 1, "{chain}");
        assert!(chain.starts_with("in p.yaml: invalid plugin configuration: unknown field `setings`"), "{chain}");
    }

    /// Each section's keys, as serde lists them in an "unknown field" error.
    fn keys_serde_lists(yaml: &str) -> Vec<String> {
        let err = PluginConfig::from_yaml(yaml).unwrap_err();
        let message = std::error::Error::source(&err).unwrap().to_string();
        let list = message.split("expected ").nth(1).unwrap_or_else(|| panic!("{message}"));
        list.split('`').skip(1).step_by(2).map(str::to_owned).collect()
    }

    #[test]
    fn every_config_key_an_error_lists_is_in_the_books_config_reference() {
        let book = include_str!("../../../docs/src/reference/plugin-config.md");
        let reference = book.split("Each plugin has a config file beside it").nth(1).unwrap();
        let reference = reference.split("```yaml").nth(1).unwrap().split("```").next().unwrap();
        let mut missing = Vec::new();
        for yaml in [
            "x: 1\n",
            "limits: {x: 1}\n",
            "grants: {x: 1}\n",
            "grants: {namespaces: {x: 1}}\n",
            "grants: {sensitive: {x: 1}}\n",
            "rateLimiter: {x: 1}\n",
            "canary: {x: 1}\n",
        ] {
            let keys = keys_serde_lists(yaml);
            assert!(keys.len() > 1, "{yaml}: {keys:?}");
            missing.extend(keys.into_iter().filter(|k| {
                !reference.contains(&format!(" {k}:"))
                    && !reference.starts_with(&format!("{k}:"))
                    && !reference.contains(&format!("\n{k}:"))
            }));
        }
        assert!(
            missing.is_empty(),
            "the book's config reference (docs/src/reference/plugin-config.md) lacks {missing:?}"
        );
    }

    #[test]
    fn absent_settings_are_checked_as_an_empty_object_and_a_bad_schema_is_named() {
        let required = PluginConfig::from_yaml("settingsSchema: {required: [mode]}\n").unwrap();
        assert!(required.check_settings().unwrap_err().to_string().contains("mode"));
        let bad = PluginConfig::from_yaml("settingsSchema: {type: 12}\n").unwrap();
        assert!(matches!(bad.check_settings(), Err(InvalidSettings::Schema(_))));
        assert_eq!(PluginConfig::default().check_settings(), Ok(()));
    }

    #[test]
    fn a_config_file_names_a_canary_strictly() {
        let c =
            PluginConfig::from_yaml("settings: {a: 1}\ncanary:\n  wasm: canary/p.wasm\n  settings: {a: 2}\n").unwrap();
        let canary = c.canary.unwrap();
        assert_eq!(canary.wasm.as_deref(), Some(std::path::Path::new("canary/p.wasm")));
        assert_eq!(canary.settings, Some(serde_json::json!({"a": 2})));
        assert!(PluginConfig::from_yaml("canary: {wasmm: x}\n").is_err());
    }

    #[test]
    fn an_empty_file_is_the_default_config() {
        assert_eq!(PluginConfig::from_yaml("\n").unwrap(), PluginConfig::default());
        assert_eq!(PluginConfig::default().settings_json(), b"{}".to_vec());
    }
}
