//! Logging setup: tracing with an env-filter, text or JSON; wasmtime/cranelift quiet by default.

use std::io::IsTerminal as _;

use tracing_subscriber::EnvFilter;

use clap::{Args, ValueEnum};

/// Directives appended to the user's filter so compiler internals stay quiet unless asked for.
/// kube's HTTP trace layer logs an ERROR for every failed request, which during an API-server
/// outage doubled every failure the host reports itself (the breaker, the rate-limited per-key
/// lines); `--log kube_client::client::builder=error` brings it back.
const QUIET: &[&str] = &[
    "cranelift_codegen=warn",
    "wasmtime_cranelift=warn",
    "wasmtime=warn",
    "hyper=warn",
    "tower=warn",
    "kube_client::client::builder=off",
];

/// Installs the global subscriber. Fails if the filter does not parse.
pub fn init(args: &LogArgs) -> Result<(), tracing_subscriber::filter::ParseError> {
    let mut filter = EnvFilter::try_new(&args.filter)?;
    for directive in QUIET {
        if !args.filter.contains(directive.split('=').next().unwrap_or_default()) {
            filter = filter.add_directive(directive.parse()?);
        }
    }
    let builder =
        tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(colour(args));
    match args.log_format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().flatten_event(true).init(),
    }
    Ok(())
}

/// Colour only for text on a terminal, and never with `NO_COLOR` set (no-color.org): a log
/// file or a pipe gets plain lines.
fn colour(args: &LogArgs) -> bool {
    args.log_format == LogFormat::Text
        && std::io::stderr().is_terminal()
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// Log output.
#[derive(Debug, Args)]
pub struct LogArgs {
    /// Log filter (tracing EnvFilter syntax), e.g. `info,kubewasm=debug`.
    #[arg(long = "log", env = "KUBEWASM_LOG", default_value = "info", global = true)]
    pub filter: String,
    /// Log format.
    #[arg(long, env = "KUBEWASM_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text, global = true)]
    pub log_format: LogFormat,
}

/// Log formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}
