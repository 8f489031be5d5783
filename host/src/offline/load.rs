//! What an offline command loads: the plugin file, its config (settings replaced if asked) and the runtime.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context as _;
use k8s_openapi::jiff;

use kubewasm_host::hotload::directory::{config_beside, read_plugin};
use kubewasm_host::hotload::{PluginFile, read_config};
use kubewasm_host::plugin::{Compiler, PluginConfig, Runtime, RuntimeConfig};

/// The plugin runtime's flags an offline command shares with `kubewasm run`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct RuntimeArgs {
    /// Directory for compiled plugins and engines (the same as `run --compile-cache`): a second
    /// run of the same component does not compile it again.
    #[arg(long, env = "KUBEWASM_COMPILE_CACHE")]
    pub compile_cache: Option<PathBuf>,
    /// Directory of the language engines a plugin given as source runs on (the same as `run
    /// --engine-dir`); default: `engines` beside the binary, else in one of the two directories
    /// above it.
    #[arg(long, env = "KUBEWASM_ENGINE_DIR")]
    pub engine_dir: Option<PathBuf>,
    /// The code generator, as `run --compiler` (default `cranelift`).
    #[arg(long, env = "KUBEWASM_COMPILER", default_value_t)]
    pub compiler: Compiler,
}

/// The plugin file for `plugin` (a component, a source file, or a directory of source files):
/// named after the file, configured by `config` or else by the `.yaml`/`.yml`/`.json` beside it.
pub fn plugin_file(plugin: &Path, config: Option<PathBuf>) -> PluginFile {
    let name = if plugin.is_dir() { plugin.file_name() } else { plugin.file_stem() };
    let name = name.unwrap_or_default().to_string_lossy().into_owned();
    let config = config.or_else(|| config_beside(plugin));
    PluginFile { name, wasm: Some(plugin.to_owned()), config }
}

/// The bytes of plugin file `path` as the runtime takes them, as the plugin directory reads
/// them: a component's, or a source file's as its bundle.
pub fn plugin_bytes(path: &Path) -> anyhow::Result<Arc<[u8]>> {
    let bytes = read_plugin(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(bytes.into())
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

/// The wasm runtime of an offline command: the host's defaults with `args`, and, given `now`, a
/// wall clock that reads `now` at every call, so a run's writes do not depend on when it runs.
pub fn runtime(args: &RuntimeArgs, now: Option<SystemTime>) -> anyhow::Result<Runtime> {
    let mut config = RuntimeConfig::default().compiler(args.compiler);
    if let Some(now) = now {
        config = config.fixed_wall_clock(now);
    }
    if let Some(dir) = &args.compile_cache {
        config = config.cache_dir(dir);
    }
    if let Some(dir) = &args.engine_dir {
        config = config.engine_dir(dir);
    }
    Ok(Runtime::new(config)?)
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
