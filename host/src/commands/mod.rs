//! One module per subcommand: its flags (a clap `Args` struct) and an `execute` that does its work.

pub mod check;
pub mod compile_plugin;
pub mod crd;
pub mod dev;
pub mod generate_key;
pub mod handover;
pub mod manifests;
pub mod new;
pub mod push;
pub mod rbac;
pub mod record;
pub mod run;
pub mod test;
