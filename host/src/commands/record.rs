//! `kubewasm record`: chosen keys reconciled once against a cluster, sending nothing, each written as a fixture `kubewasm test` replays.

use std::path::PathBuf;

use anyhow::Context as _;
use clap::Args;

use crate::offline::{self, config_with_settings, fixtures, plugin_file, runtime};

/// `kubewasm record`.
#[derive(Debug, Args)]
pub struct RecordArgs {
    /// The plugin: its component (`<name>.wasm`), or its source (`<name>.py`, `<name>.js`, or a
    /// directory `<name>/` of them), whose config names its engine.
    pub plugin: PathBuf,
    /// Key to record (`namespace/name`, or `name` for a cluster-scoped kind); repeatable.
    #[arg(long = "key", required = true, env = "KUBEWASM_RECORD_KEY", value_delimiter = ',')]
    pub keys: Vec<String>,
    /// Directory for the fixture files, one per key: `<namespace>_<name>.yaml` or `<name>.yaml`.
    #[arg(long, env = "KUBEWASM_RECORD_OUT", default_value = ".")]
    pub out: PathBuf,
    /// Kubeconfig file; default: $KUBECONFIG, ~/.kube/config, else the in-cluster service account.
    #[arg(long, env = "KUBEWASM_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Kubeconfig context to use; default: the current context.
    #[arg(long, env = "KUBEWASM_CONTEXT")]
    pub context: Option<String>,
    /// Settings (YAML or JSON) to use instead of those of the config file.
    #[arg(long, env = "KUBEWASM_RECORD_SETTINGS")]
    pub settings: Option<PathBuf>,
    /// Its config file; default: `<name>.yaml` (`.yml`, `.json`) beside it, if present.
    #[arg(long, env = "KUBEWASM_RECORD_CONFIG")]
    pub config: Option<PathBuf>,
    /// The plugin runtime.
    #[command(flatten)]
    pub runtime: offline::RuntimeArgs,
}

impl RecordArgs {
    /// Writes one fixture file per key in `--out`; prints their paths.
    pub async fn execute(self) -> anyhow::Result<()> {
        let file = plugin_file(&self.plugin, self.config.clone());
        let config = config_with_settings(&file, self.settings.as_deref())?;
        let wasm = offline::plugin_bytes(&self.plugin)?;
        let client = kubewasm_host::app::client(self.kubeconfig.as_deref(), self.context.as_deref()).await?;
        let (at, now) = offline::now_to_the_second();
        let runtime = runtime(&self.runtime, Some(at))?;
        let keys: Vec<_> = self.keys.iter().map(|k| fixtures::parse_key(k)).collect();
        let files = offline::record::record(&runtime, client, &file.name, wasm, config, &keys, &now).await?;
        std::fs::create_dir_all(&self.out).with_context(|| format!("creating {}", self.out.display()))?;
        for (key, text) in files {
            let name = match key.namespace() {
                Some(ns) => format!("{ns}_{}.yaml", key.name()),
                None => format!("{}.yaml", key.name()),
            };
            let path = self.out.join(name);
            std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
            println!("{}", path.display());
        }
        Ok(())
    }
}
