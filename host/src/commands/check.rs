//! `kubewasm check`: one plugin loaded with no cluster, its registration and effective grants printed.

use std::path::PathBuf;
use std::sync::Arc;

use crate::offline;
use anyhow::Context as _;
use clap::Args;
use kube::core::GroupVersionKind;
use kubewasm_host::hotload::read_config;
use kubewasm_host::plugin::api::NoCluster;

/// `kubewasm check`.
#[derive(Debug, Args)]
pub struct CheckArgs {
    /// The plugin: its component (`<name>.wasm`), or its source (`<name>.py`, `<name>.js`, or a
    /// directory `<name>/` of them), whose config names its engine.
    pub plugin: PathBuf,
    /// Its config file; default: `<name>.yaml` (`.yml`, `.json`) beside it, if present.
    #[arg(long, env = "KUBEWASM_CHECK_CONFIG")]
    pub config: Option<PathBuf>,
    /// The plugin runtime.
    #[command(flatten)]
    pub runtime: offline::RuntimeArgs,
}

impl CheckArgs {
    /// Loads the plugin with no cluster behind it; returns its name (the file's) and the plugin.
    pub async fn load(self) -> anyhow::Result<(String, kubewasm_host::plugin::Plugin)> {
        let file = offline::plugin_file(&self.plugin, self.config.clone());
        let (name, config) = match file.config.as_deref().map(wasm_plugin_manifest).transpose()?.flatten() {
            Some(manifest) => (kube::ResourceExt::name_any(&manifest), manifest.spec.plugin_config()),
            None => (file.name.clone(), read_config(&file)?),
        };
        let config_path = file.config;
        let wasm = offline::plugin_bytes(&self.plugin)?;
        let runtime = offline::runtime(&self.runtime, None)?;
        let loaded = runtime.load(&name, wasm, config, Arc::new(NoCluster), Arc::new(NoCluster));
        // A rejection names the file to fix: the config for its grants, limits or settings.
        let plugin = loaded.await.map_err(|e| {
            let blamed = match (config_path, e.blames_config()) {
                (Some(config), true) => config.display().to_string(),
                (None, true) => format!(
                    "{} (absent: create it beside {})",
                    self.plugin.with_extension("yaml").display(),
                    self.plugin.display()
                ),
                (_, false) => self.plugin.display().to_string(),
            };
            anyhow::Error::new(e).context(blamed)
        })?;
        Ok((name, plugin))
    }

    /// Loads the plugin with no cluster behind it and prints what it registers and may access
    /// (everything it asks for, approved by its config; else the load fails listing what is not).
    pub async fn execute(self) -> anyhow::Result<()> {
        let (name, plugin) = self.load().await?;
        let reg = plugin.registration();
        println!("plugin:         {name} (sha256 {})", plugin.sha256());
        let no_filter = kubewasm_host::plugin::registration::EventFilter::default();
        let owns = reg.owns.iter().enumerate().map(|(i, kind)| (kind, reg.owns_filters.get(i).unwrap_or(&no_filter)));
        println!("reconciles:     {}", filtered([(&reg.for_kind, &reg.for_filter)]));
        println!("owns:           {}", filtered(owns));
        println!("watches:        {}", filtered(reg.watches.iter().map(|w| (&w.kind, &w.filter))));
        println!(
            "reads:          {}",
            plugin.grants().readable().map(ToString::to_string).collect::<Vec<_>>().join(", ")
        );
        let join = |kinds: Vec<String>| kinds.join(", ");
        println!("writes status:  {}", join(plugin.grants().status_writable().map(ToString::to_string).collect()));
        println!("writes:         {}", join(plugin.grants().writable().map(ToString::to_string).collect()));
        println!(
            "writes where it controls the object: {}",
            join(plugin.grants().writable_controlled().map(ToString::to_string).collect())
        );
        let dangerous: Vec<String> = plugin.grants().dangerous().map(ToString::to_string).collect();
        println!(
            "dangerous kinds it may write (approved): {}",
            if dangerous.is_empty() { "-".to_owned() } else { join(dangerous) }
        );
        println!("max-concurrent: {}", plugin.max_concurrent());
        Ok(())
    }
}

/// The WasmPlugin `path` holds, if it is a WasmPlugin manifest rather than a plugin config
/// file: its spec is then the config, and its name the plugin's.
fn wasm_plugin_manifest(path: &std::path::Path) -> anyhow::Result<Option<kubewasm_host::hotload::WasmPlugin>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let value: serde_yaml::Value =
        serde_yaml::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
    if value.get("kind").and_then(serde_yaml::Value::as_str) != Some("WasmPlugin") {
        return Ok(None);
    }
    let manifest =
        serde_yaml::from_value(value).with_context(|| format!("{}: not a valid WasmPlugin", path.display()))?;
    Ok(Some(manifest))
}

/// Kinds as a manifest names them, `apiVersion kind` (`v1 Namespace`, `apps/v1 Deployment`),
/// each with its event filter in parentheses if it has one, comma-separated; `-` for none.
fn filtered<'a>(
    kinds: impl IntoIterator<Item = (&'a GroupVersionKind, &'a kubewasm_host::plugin::registration::EventFilter)>,
) -> String {
    let names: Vec<String> = kinds
        .into_iter()
        .map(|(g, filter)| match filter.is_empty() {
            true => format!("{} {}", g.api_version(), g.kind),
            false => format!("{} {} ({filter})", g.api_version(), g.kind),
        })
        .collect();
    if names.is_empty() { "-".to_owned() } else { names.join(", ") }
}
