//! `kubewasm rbac`: the least-privilege RBAC of one plugin's own identity, as YAML.

use clap::Args;

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
        print!("{}", kubewasm_host::rbac::manifest(&name, plugin.grants(), &identity, &names)?);
        Ok(())
    }
}
