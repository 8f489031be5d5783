//! `kubewasm:controller/events`: Kubernetes Events reported as `kubewasm/<plugin>`, each one
//! [`ApiCall::Event`] handed to [`request`](PluginCtx::request).

use super::function::Outcome;
use crate::api::{ApiCall, ApiReply, CallError, EventRecord, MAX_NOTE, ObjectRef};
use crate::bindings::v0_2::{events as e2, types as t2};
use crate::bindings::{events, types};
use crate::state::PluginCtx;

/// The Event a plugin publishes, its note cut to [`MAX_NOTE`] (its reason is checked when it is
/// sent).
fn event(regarding: ObjectRef, warning: bool, reason: String, mut note: String) -> ApiCall {
    note.truncate(note.floor_char_boundary(MAX_NOTE));
    ApiCall::Event(EventRecord { regarding, warning, reason, note, by_host: false })
}

fn published(_: ApiReply) -> Result<(), CallError> {
    Ok(())
}

impl events::Host for PluginCtx {
    async fn publish(
        &mut self,
        regarding: types::ObjectRef,
        event_type: events::EventType,
        reason: String,
        note: String,
    ) -> Outcome<(), types::Error> {
        let regarding =
            ObjectRef { kind: regarding.kind.into(), namespace: regarding.key.namespace, name: regarding.key.name };
        let warning = matches!(event_type, events::EventType::Warning);
        self.request("events.publish", Ok(event(regarding, warning, reason, note)), published).await
    }
}

impl e2::Host for PluginCtx {
    async fn publish(
        &mut self,
        regarding: t2::ObjectRef,
        event_type: e2::EventType,
        reason: String,
        note: String,
    ) -> Outcome<(), t2::Error> {
        let regarding =
            ObjectRef { kind: regarding.kind.into(), namespace: regarding.key.namespace, name: regarding.key.name };
        let warning = matches!(event_type, e2::EventType::Warning);
        self.request("events.publish", Ok(event(regarding, warning, reason, note)), published).await
    }
}
