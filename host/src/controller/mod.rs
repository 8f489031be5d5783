//! Controllers: one per plugin — triggers (For/Owns/Watches) feed keys into its WorkQueue, and
//! workers hand them to the plugin.

pub mod metrics;
pub mod worker;

pub use metrics::ControllerMetrics;
pub use worker::{Outcome, Reconciler};
