//! The `kubewasm` binary's library: command-line parsing and the commands that are not the host
//! itself (offline test and record, scaffold, dev, telemetry).
//!
//! The host library is the `kubewasm-host` crate (`crates/host`); this crate is the only one
//! that knows clap or starts a local control plane (`kubewasm-testenv`, for `kubewasm dev`).
//! It is a library beside `main.rs` so that the e2e tests can call the commands
//! ([`offline`], [`scaffold`]). Start reading at `main.rs` (one arm per subcommand), then
//! [`cli`] (every flag) and [`run`] (`kubewasm run`: flags to a running [`kubewasm_host::app::App`]).

pub mod cli;
pub mod dev;
pub mod offline;
pub mod run;
pub mod scaffold;
pub mod telemetry;
