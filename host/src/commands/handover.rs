//! `kubewasm handover`: what one plugin made, handed over to another by an operator.

use std::path::PathBuf;

use clap::Args;
use kubewasm_host::handover::Handover;
use kubewasm_host::plugin::grants::KindRef;

/// `kubewasm handover`.
#[derive(Debug, Args)]
pub struct HandoverArgs {
    /// The plugin that made the objects (its old name, or the plugin that took the names first).
    #[arg(long)]
    pub from: String,
    /// The plugin they go to.
    #[arg(long)]
    pub to: String,
    /// Only objects of this kind (`Kind.group`, `Kind` for the core group); repeatable; default:
    /// every kind the API server serves.
    #[arg(long = "kind", value_delimiter = ',')]
    pub kinds: Vec<KindRef>,
    /// Only objects in this namespace; default: every namespace, and cluster-scoped objects.
    #[arg(long)]
    pub namespace: Option<String>,
    /// Print what would be handed over, and change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Kubeconfig file; default: $KUBECONFIG, ~/.kube/config, else the in-cluster service account.
    #[arg(long, env = "KUBEWASM_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Kubeconfig context to use; default: the current context.
    #[arg(long, env = "KUBEWASM_CONTEXT")]
    pub context: Option<String>,
}

impl HandoverArgs {
    /// Hands the objects over with the caller's credentials (a person: the admission policy
    /// refuses this to every plugin identity) and prints one line per object.
    pub async fn execute(self) -> anyhow::Result<()> {
        let client = kubewasm_host::app::client(self.kubeconfig.as_deref(), self.context.as_deref()).await?;
        let handover = Handover {
            from: self.from,
            to: self.to,
            kinds: self.kinds,
            namespace: self.namespace,
            dry_run: self.dry_run,
        };
        let outcomes = handover.run(&client).await?;
        let verb = if handover.dry_run { "would hand over" } else { "handed over" };
        let mut failed = 0;
        for outcome in &outcomes {
            match &outcome.failed {
                None => println!("{verb} {}", outcome.object),
                Some(why) => {
                    failed += 1;
                    println!("not handed over {}: {why}", outcome.object);
                }
            }
        }
        if outcomes.is_empty() {
            println!("no object is marked as made by plugin {}", handover.from);
        }
        anyhow::ensure!(failed == 0, "{failed} of {} objects were not handed over", outcomes.len());
        Ok(())
    }
}
