//! Command line: the subcommands and their dispatch (each one's flags and work: [`crate::commands`]).

use clap::{Parser, Subcommand};

use crate::commands::{
    check, compile_plugin, crd, dev, generate_key, handover, manifests, new, push, rbac, record, run, test,
};
use crate::telemetry::LogArgs;

/// Runs Kubernetes controllers whose reconcile logic is a sandboxed WebAssembly component.
#[derive(Debug, Parser)]
#[command(name = "kubewasm", version, about)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
    /// Logging.
    #[command(flatten)]
    pub log: LogArgs,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the controllers of every plugin in a directory against a cluster.
    Run(Box<run::RunArgs>),
    /// Load one plugin without a cluster and print its registration and effective grants.
    Check(check::CheckArgs),
    /// Print the least-privilege RBAC of one plugin's own identity (YAML): its ServiceAccount,
    /// the rules its effective grants need, and the host's right to impersonate it.
    Rbac(rbac::RbacArgs),
    /// Hand what one plugin made (the host's mark, its field managers) over to another: after a
    /// rename, or when another plugin took a child's name first. Run it as a person.
    Handover(handover::HandoverArgs),
    /// Print the WasmPlugin CustomResourceDefinition (YAML).
    Crd,
    /// Print the host's deployment (YAML): the WasmPlugin CRD, its namespace, ServiceAccount,
    /// RBAC, admission policies, Deployment and Service, for `kubectl apply --server-side -f -`.
    Manifests(manifests::ManifestsArgs),
    /// Run a plugin's reconciles without a cluster over objects from YAML files and print the
    /// writes and Events it would make (exits 1 when they differ from `--expect`).
    Test(test::TestArgs),
    /// Reconcile chosen keys once against a cluster, sending nothing, and write for each a
    /// fixture file (the objects it read, the writes it would make) that `kubewasm test` replays.
    Record(record::RecordArgs),
    /// Start a local control plane (etcd + kube-apiserver), write its kubeconfig and run the
    /// plugins of a directory on it with hot reload, until Ctrl-C.
    Dev(Box<dev::DevArgs>),
    /// Create a plugin project outside this repository: build script, config with a settings
    /// schema, and an offline test that runs `kubewasm test` (`cargo test`, `pytest`, `node --test`).
    New(new::NewArgs),
    /// Push a component to an OCI registry as the standard wasm artifact and print its
    /// reference pinned by digest (what a WasmPlugin's `module.oci.ref` names).
    Push(push::PushArgs),
    /// Write a new ECDSA P-256 key pair for `push --sign-key` (`<prefix>.key`) and a WasmPlugin's
    /// `module.oci.signature` (`<prefix>.pub`); cosign verifies with the same public key.
    GenerateKey(generate_key::GenerateKeyArgs),
    /// Compile one component (stdin) into a compile cache: what the host runs in a child process.
    #[command(name = kubewasm_host::plugin::compile_process::SUBCOMMAND, hide = true)]
    CompilePlugin(compile_plugin::CompileArgs),
}

impl Command {
    /// Runs the subcommand to its end (`run` and `dev`: until SIGTERM/SIGINT).
    pub async fn execute(self) -> anyhow::Result<()> {
        match self {
            Command::Run(args) => args.execute().await,
            Command::Check(args) => args.execute().await,
            Command::Rbac(args) => args.execute().await,
            Command::Handover(args) => args.execute().await,
            Command::Crd => crd::execute(),
            Command::Manifests(args) => args.execute(),
            Command::Test(args) => args.execute().await,
            Command::Record(args) => args.execute().await,
            Command::Dev(args) => args.execute().await,
            Command::New(args) => args.execute(),
            Command::Push(args) => args.execute().await,
            Command::GenerateKey(args) => args.execute(),
            Command::CompilePlugin(args) => args.execute(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }
}
