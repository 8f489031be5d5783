//! The host's integration tests, in one binary so they link once (as wasmtime's `tests/all`):
//! each module was a test binary of its own. Most run against a real kube-apiserver + etcd from
//! `kubewasm-testenv`: `ControlPlane::shared()` gives the tests of one file one control plane,
//! as when the file was a binary, so files that act on every Namespace or WasmPlugin (the
//! examples, `kubewasm run` processes) never see each other's objects; a few tests start a
//! control plane of their own. Two files stay binaries of their own because they would disturb
//! the others: `outage_e2e` (stops its API server and installs its own global tracing
//! subscriber) and `shard_e2e` (10,000 objects and Lease hand-overs that a busy process would
//! starve).
//!
//! One module: `cargo test -p kubewasm --test all hotload::`.

#[path = "../common/mod.rs"]
mod common;
#[path = "../hotload_support/mod.rs"]
mod hotload_support;

mod canary;
mod chaos;
mod cli;
mod contract;
mod controller;
mod cronjob;
mod dangerous_kinds;
mod deploy;
mod desired;
mod dev;
mod elide;
mod events;
mod fair_shares;
mod fair_shares_e2e;
mod first_writes;
mod go_plugin;
mod hotload;
mod image;
mod independence;
mod informer;
mod isolation;
mod isolation_attacks;
mod isolation_depth;
mod js_sources;
mod languages;
mod leader;
mod new;
mod oci;
mod offline;
mod plugin_runtime;
mod readiness;
mod record;
mod refused;
mod rejected;
mod sample_controller;
mod sandbox;
mod settings;
mod shutdown;
mod sources;
mod swap;
mod wasmplugin;
mod wasmplugin_sources;
mod workers;
