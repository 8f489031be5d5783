//! `kubewasm rbac`: the least-privilege RBAC of one plugin's own identity, as YAML.

use anyhow::Context as _;
use clap::Args;
use k8s_openapi::api::rbac::v1::PolicyRule;

use super::check::CheckArgs;

/// `kubewasm rbac`.
#[derive(Debug, Args)]
pub struct RbacArgs {
    /// The plugin, loaded as `kubewasm check` loads it; `--config` may also be a WasmPlugin
    /// manifest, whose spec is then the config and whose name the plugin's.
    #[command(flatten)]
    pub plugin: CheckArgs,
    /// The host's namespace, where the plugin's ServiceAccount is made.
    #[arg(long, default_value = "kubewasm-system")]
    pub namespace: String,
    /// The host's ServiceAccount, which impersonates the plugin's.
    #[arg(long, default_value = "kubewasm")]
    pub host_service_account: String,
    /// A YAML list of RBAC rules to add to the plugin's roles: rights its grants cannot
    /// express, such as `bind` on the roles its RoleBindings name (the command says which kinds
    /// need them).
    #[arg(long, value_name = "FILE")]
    pub rules: Option<std::path::PathBuf>,
}

impl RbacArgs {
    /// Loads the plugin as `kubewasm check` does and prints its ServiceAccount and RBAC.
    pub async fn execute(self) -> anyhow::Result<()> {
        let (name, plugin) = self.plugin.load().await?;
        let identity = kubewasm_host::rbac::Identity {
            namespace: self.namespace,
            host_service_account: self.host_service_account,
        };
        let names = kubewasm_host::rbac::ResourceNames::guessed();
        let extra: Vec<PolicyRule> = match &self.rules {
            Some(path) => {
                let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
                serde_yaml::from_str(&text).with_context(|| format!("{}: not a list of RBAC rules", path.display()))?
            }
            None => Vec::new(),
        };
        if extra.is_empty() {
            for note in kubewasm_host::rbac::underivable(plugin.grants()) {
                eprintln!("kubewasm rbac: {note} (--rules FILE)");
            }
        }
        print!("{}", kubewasm_host::rbac::manifest(&name, plugin.grants(), &identity, &names, &extra)?);
        Ok(())
    }
}
