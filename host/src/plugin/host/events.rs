//! `kubewasm:controller/events`: Kubernetes Events reported as `kubewasm/<plugin>`.

use super::{CallError, EventRecord, ObjectRef};
use crate::plugin::bindings::{events, types};
use crate::plugin::state::PluginCtx;

/// Longest event note kept, in bytes (the API server allows 1 KiB for `note`).
pub const MAX_NOTE: usize = 1024;

/// Longest event reason (the API server allows 128 characters).
pub const MAX_REASON: usize = 128;

fn truncate(mut s: String, max: usize) -> String {
    s.truncate(s.floor_char_boundary(max));
    s
}

impl events::Host for PluginCtx {
    async fn publish(
        &mut self,
        regarding: types::ObjectRef,
        event_type: events::EventType,
        reason: String,
        note: String,
    ) -> wasmtime::Result<Result<(), types::Error>> {
        self.charge()?;
        if let Err(e) = self.throttle_write().await {
            return Ok(self.finish("events.publish", Err(e)));
        }
        let regarding =
            ObjectRef { kind: regarding.kind.into(), namespace: regarding.key.namespace, name: regarding.key.name };
        let valid = if reason.is_empty() || reason.len() > MAX_REASON {
            Err(CallError::Invalid(format!("event reason must be 1..={MAX_REASON} characters")))
        } else {
            self.check_read(&regarding.kind)
        };
        let result = match valid {
            Ok(()) => {
                let event = EventRecord {
                    regarding,
                    warning: matches!(event_type, events::EventType::Warning),
                    reason,
                    note: truncate(note, MAX_NOTE),
                };
                self.shared.writer.publish_event(&self.shared.manager, &event).await
            }
            Err(e) => Err(e),
        };
        Ok(self.finish("events.publish", result))
    }
}
