//! `kubewasm:controller/events`: Kubernetes Events reported as `kubewasm/<plugin>`.

use super::{ApiCall, CallError, EventRecord, ObjectRef};
use crate::bindings::v0_2::{events as e2, types as t2};
use crate::bindings::{events, types};
use crate::state::PluginCtx;

/// Longest event note kept, in bytes (the API server allows 1 KiB for `note`).
pub const MAX_NOTE: usize = 1024;

/// Longest event reason (the API server allows 128 characters).
pub const MAX_REASON: usize = 128;

fn truncate(mut s: String, max: usize) -> String {
    s.truncate(s.floor_char_boundary(max));
    s
}

impl PluginCtx {
    /// `events.publish` of either contract version.
    async fn publish_as(
        &mut self,
        regarding: ObjectRef,
        warning: bool,
        reason: String,
        note: String,
    ) -> Result<(), CallError> {
        if reason.is_empty() || reason.len() > MAX_REASON {
            return Err(CallError::Invalid(format!("event reason must be 1..={MAX_REASON} characters")));
        }
        let note = truncate(note, MAX_NOTE);
        let call = ApiCall::Event(EventRecord { regarding, warning, reason, note, by_host: false });
        self.authorize(&call.access()).await?;
        // Events are droppable (WIT) and have a bucket of their own: past it an Event is dropped
        // and counted, so a reconcile never waits for an Event, nor its writes behind Events.
        if !self.shared.event_limiter.try_acquire() {
            self.shared.metrics.write_throttled(&self.shared.name, "event_dropped");
            return Ok(());
        }
        self.shared.writer.send(&self.shared.caller, &call).await.map(drop)
    }
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
        let regarding =
            ObjectRef { kind: regarding.kind.into(), namespace: regarding.key.namespace, name: regarding.key.name };
        let warning = matches!(event_type, events::EventType::Warning);
        let result = self.publish_as(regarding, warning, reason, note).await;
        Ok(self.finish("events.publish", result))
    }
}

impl e2::Host for PluginCtx {
    async fn publish(
        &mut self,
        regarding: t2::ObjectRef,
        event_type: e2::EventType,
        reason: String,
        note: String,
    ) -> wasmtime::Result<Result<(), t2::Error>> {
        self.charge()?;
        let regarding =
            ObjectRef { kind: regarding.kind.into(), namespace: regarding.key.namespace, name: regarding.key.name };
        let warning = matches!(event_type, e2::EventType::Warning);
        let result = self.publish_as(regarding, warning, reason, note).await;
        Ok(self.finish("events.publish", result))
    }
}
