//! `kubewasm:controller/events`: Kubernetes Events reported as `kubewasm/<plugin>`, written once
//! for every contract version: each one [`ApiCall::Event`] handed to
//! [`request`](PluginCtx::request).

use super::function::Outcome;
use crate::api::{ApiCall, CallError, EventRecord, MAX_NOTE, ObjectRef};
use crate::state::PluginCtx;

impl PluginCtx {
    /// `events.publish`: the note cut to [`MAX_NOTE`]; the reason is checked when it is sent.
    pub(crate) async fn events_publish<E: From<CallError>>(
        &mut self,
        regarding: ObjectRef,
        warning: bool,
        reason: String,
        mut note: String,
    ) -> Outcome<(), E> {
        note.truncate(note.floor_char_boundary(MAX_NOTE));
        let event = ApiCall::Event(EventRecord { regarding, warning, reason, note, by_host: false });
        self.request("events.publish", Ok(event), |_| Ok(())).await
    }
}
