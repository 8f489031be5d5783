//! What an offline command loads: the plugin file, its config (settings replaced if asked) and the runtime.

use std::path::{Path, PathBuf};

use anyhow::Context as _;

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

/// The wasm runtime of an offline command: the host's defaults, with the compile cache if any.
pub fn runtime(compile_cache: Option<&Path>) -> anyhow::Result<Runtime> {
    let config = RuntimeConfig::default();
    Ok(Runtime::new(match compile_cache {
        Some(dir) => config.cache_dir(dir),
        None => config,
    })?)
}
