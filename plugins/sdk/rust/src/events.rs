//! Kubernetes Events about objects, reported by controller `kubewasm/<plugin>`.

use crate::bindings::kubewasm::controller::events::{EventType, publish};
use crate::{ObjectRef, Result};

/// A routine event (`reason` in UpperCamelCase, `note` a sentence).
pub fn normal(regarding: &ObjectRef, reason: &str, note: &str) -> Result<()> {
    Ok(publish(regarding, EventType::Normal, reason, note)?)
}

/// An event that needs attention.
pub fn warning(regarding: &ObjectRef, reason: &str, note: &str) -> Result<()> {
    Ok(publish(regarding, EventType::Warning, reason, note)?)
}
