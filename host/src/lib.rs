//! The `kubewasm` binary's library: command-line parsing and the commands that are not the host
//! itself (offline test and record, scaffold, dev, telemetry).
//!
//! The host library is the `kubewasm-host` crate (`crates/host`); this crate is the only one
//! that knows clap or starts a local control plane (`kubewasm-testenv`, for `kubewasm dev`).
//! It is a library beside `main.rs` so that the e2e tests can call the commands
//! ([`offline`], [`scaffold`]). Start reading at [`cli`] (the subcommands), then
//! [`commands`] (one file per subcommand: its flags and its `execute`), e.g. [`commands::run`]
//! (`kubewasm run`: flags to a running [`kubewasm_host::app::App`]).

pub mod cli;
pub mod commands;
pub mod offline;
pub mod scaffold;
pub mod telemetry;
