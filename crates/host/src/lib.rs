//! kubewasm's host library: a Kubernetes controller host that runs each controller's reconcile
//! logic as a sandboxed WebAssembly component.
//!
//! The host owns everything that talks to the API server — informers, caches, indexes and
//! workqueues — and hands each dequeued key to a plugin through the `kubewasm:controller` WIT
//! world (see `wit/`). This crate sits above `kubewasm-runtime` (re-exported as [`plugin`]),
//! `kubewasm-informer` ([`informer`]) and `kubewasm-queue` ([`queue`]), and below the `kubewasm`
//! binary (`host/`), which alone parses flags, knows clap and starts local control planes.
//! Start reading at [`app::App`], which builds the shared parts and loads plugins; then
//! [`hotload`] (plugin sources and the set of loaded versions), [`controller`] (one per plugin:
//! informers, triggers, workers) and [`writer`] (the write path a plugin's requests take).

pub mod admin;
pub mod app;
pub mod breaker;
pub mod canary;
pub mod controller;
pub mod event_sink;
pub mod handover;
pub mod hotload;
pub mod identity;
#[cfg(test)]
mod layering;
pub mod leader;
pub mod rbac;
pub mod shard;
pub mod shutdown;
pub mod writer;

/// Shared informers and their caches, a crate of its own (`crates/informer`).
pub use kubewasm_informer as informer;
/// The work queue, a crate of its own (`crates/queue`): it knows nothing of the host.
pub use kubewasm_queue as queue;
/// The plugin runtime, a crate of its own (`crates/runtime`): it knows the informer cache and
/// the queue's rate limiters, and nothing of controllers, hot load or the CLI.
pub use kubewasm_runtime as plugin;
