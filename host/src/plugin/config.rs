//! A plugin's operator configuration: grants, limits, settings, concurrency.
//!
//! Read from `<name>.yaml` (or `.json`) beside `<name>.wasm`; later also the WasmPlugin spec.
//! Strict: unknown fields are errors, so a typo never silently drops a limit.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::grants::GrantConfig;
use super::limits::Limits;
use crate::queue::rate_limiter::LimiterConfig;

/// Operator configuration of one plugin.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct PluginConfig {
    /// Access beyond the defaults.
    pub grants: GrantConfig,
    /// Sandbox limits.
    pub limits: Limits,
    /// Settings handed to the plugin as JSON through `config.settings`.
    pub settings: Option<Value>,
    /// Concurrent reconciles; overrides the plugin's own `max-concurrent`.
    pub max_concurrent: Option<u32>,
    /// Retry backoff of the plugin's keys (client-go's defaults). Read when the plugin's
    /// controller is made; a new version swapped in keeps its queue and limiter.
    pub rate_limiter: LimiterConfig,
}

/// A configuration file that cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("invalid plugin configuration: {0}")]
pub struct ConfigError(#[source] pub serde_yaml::Error);

impl PluginConfig {
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
        let err = PluginConfig::from_yaml("limitz: {}\n").unwrap_err();
        assert!(err.to_string().contains("unknown field `limitz`"), "{err}");
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
    fn an_empty_file_is_the_default_config() {
        assert_eq!(PluginConfig::from_yaml("\n").unwrap(), PluginConfig::default());
        assert_eq!(PluginConfig::default().settings_json(), b"{}".to_vec());
    }
}
