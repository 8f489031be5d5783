//! What an offline command loads: the plugin file, its config (settings replaced if asked) and the runtime.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context as _;
use k8s_openapi::jiff;

use kubewasm_host::hotload::directory::config_beside;
use kubewasm_host::hotload::{PluginFile, read_config};
use kubewasm_host::plugin::{PluginConfig, Runtime, RuntimeConfig};

/// The plugin file for `wasm`: named after the file, configured by `config` or else by the
/// `.yaml`/`.yml`/`.json` beside it.
pub fn plugin_file(wasm: &Path, config: Option<PathBuf>) -> PluginFile {
    let name = wasm.file_stem().unwrap_or_default().to_string_lossy().into_owned();
    let config = config.or_else(|| config_beside(wasm));
    PluginFile { name, wasm: Some(wasm.to_owned()), config }
}

/// The plugin's config, with its settings replaced by the file `settings` if given.
pub fn config_with_settings(file: &PluginFile, settings: Option<&Path>) -> anyhow::Result<PluginConfig> {
    let mut config = read_config(file)?;
    if let Some(path) = settings {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        config.settings = Some(serde_yaml::from_str(&text).with_context(|| format!("parsing {}", path.display()))?);
    }
    Ok(config)
}

/// The wasm runtime of an offline command: the host's defaults, with the compile cache if any,
/// and a wall clock that reads `now` at every call, so a run's writes do not depend on when it
/// runs.
pub fn runtime(compile_cache: Option<&Path>, now: SystemTime) -> anyhow::Result<Runtime> {
    let config = RuntimeConfig::default().fixed_wall_clock(now);
    Ok(Runtime::new(match compile_cache {
        Some(dir) => config.cache_dir(dir),
        None => config,
    })?)
}

/// `time` (RFC 3339, as `lastTransitionTime` is written) as a [`SystemTime`].
pub fn parse_time(time: &str) -> Result<SystemTime, String> {
    let at: jiff::Timestamp = time.parse().map_err(|e| format!("{time:?} is not an RFC 3339 time: {e}"))?;
    let since =
        Duration::from_nanos(u64::try_from(at.as_nanosecond()).map_err(|_| format!("{time:?} is before 1970"))?);
    Ok(UNIX_EPOCH + since)
}

/// The current time to the second, as [`parse_time`] reads it back.
pub fn now_to_the_second() -> (SystemTime, String) {
    let seconds = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
    let at = UNIX_EPOCH + Duration::from_secs(seconds);
    let text = jiff::Timestamp::from_second(i64::try_from(seconds).unwrap_or(i64::MAX)).map(|t| t.to_string());
    (at, text.unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_time_is_read_as_rfc_3339_and_the_current_one_reads_back() {
        assert_eq!(parse_time("1970-01-01T00:01:40Z"), Ok(UNIX_EPOCH + Duration::from_secs(100)));
        assert!(parse_time("yesterday").unwrap_err().contains("not an RFC 3339 time"));
        let (at, text) = now_to_the_second();
        assert_eq!(parse_time(&text), Ok(at));
    }
}
