//! The `kubewasm` binary: CLI → telemetry → the subcommand, until it ends (`run` and `dev`: SIGTERM/SIGINT).

use anyhow::Context as _;
use clap::Parser as _;
use kubewasm::cli::Cli;
use kubewasm::telemetry;

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    telemetry::init(&cli.log).context("invalid --log filter")?;
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(cli.command.execute())
}
