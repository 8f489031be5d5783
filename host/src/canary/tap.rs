//! The serving version's writes of one reconcile, seen on their way out: an [`ApiWriter`] that
//! copies each write into the log of the reconcile running in the current task, then sends it.
//!
//! The log is a tokio task-local set around a reconcile (host functions run in the task of the
//! reconcile that calls them), so concurrent reconciles of one plugin keep separate logs and a
//! reconcile with no log set pays one thread-local read per write.

use std::future::Future;
use std::sync::Arc;

use async_trait::async_trait;
use parking_lot::Mutex;

use crate::plugin::host::{
    ApiWriter, CallError, Caller, DeleteOptions, EventRecord, ObjectRef, Patch, PatchOptions, TypedObject,
};
use crate::writer::record::IntendedWrite;

/// The writes one reconcile made (or tried to make), in order.
#[derive(Debug, Default)]
pub struct WriteLog(Mutex<Vec<IntendedWrite>>);

impl WriteLog {
    /// The writes logged so far.
    pub fn take(&self) -> Vec<IntendedWrite> {
        std::mem::take(&mut *self.0.lock())
    }
}

tokio::task_local! {
    static LOG: Option<Arc<WriteLog>>;
}

/// Runs `f` with its writes through a [`TapWriter`] copied into `log` (none when `None`).
pub async fn logged<F: Future>(log: Option<Arc<WriteLog>>, f: F) -> F::Output {
    LOG.scope(log, f).await
}

fn note(write: impl FnOnce() -> IntendedWrite) {
    let _ = LOG.try_with(|log| {
        if let Some(log) = log {
            log.0.lock().push(write());
        }
    });
}

/// Sends every write through `inner`, copying it first into the current reconcile's
/// [`WriteLog`], if [`logged`] set one.
pub struct TapWriter(pub Arc<dyn ApiWriter>);

#[async_trait]
impl ApiWriter for TapWriter {
    async fn apply(&self, caller: &Caller, object: &TypedObject, force: bool) -> Result<Vec<u8>, CallError> {
        note(|| IntendedWrite::Apply { object: object.body.clone(), force });
        self.0.apply(caller, object, force).await
    }

    async fn apply_status(&self, caller: &Caller, object: &TypedObject, force: bool) -> Result<Vec<u8>, CallError> {
        note(|| IntendedWrite::ApplyStatus { object: object.body.clone(), force });
        self.0.apply_status(caller, object, force).await
    }

    async fn patch(
        &self,
        caller: &Caller,
        target: &ObjectRef,
        patch: &Patch,
        options: &PatchOptions,
    ) -> Result<Vec<u8>, CallError> {
        note(|| IntendedWrite::Patch(target.clone(), patch.clone(), options.clone()));
        self.0.patch(caller, target, patch, options).await
    }

    async fn create(&self, caller: &Caller, object: &TypedObject) -> Result<Vec<u8>, CallError> {
        note(|| IntendedWrite::Create(object.body.clone()));
        self.0.create(caller, object).await
    }

    async fn delete(&self, caller: &Caller, target: &ObjectRef, options: &DeleteOptions) -> Result<(), CallError> {
        note(|| IntendedWrite::Delete(target.clone(), options.clone()));
        self.0.delete(caller, target, options).await
    }

    async fn get(&self, caller: &Caller, target: &ObjectRef) -> Result<Option<Vec<u8>>, CallError> {
        self.0.get(caller, target).await
    }

    async fn publish_event(&self, caller: &Caller, event: &EventRecord) -> Result<(), CallError> {
        note(|| IntendedWrite::Event(event.clone()));
        self.0.publish_event(caller, event).await
    }

    async fn scope(&self, kind: &kube::core::GroupVersionKind) -> Result<crate::plugin::host::Scope, CallError> {
        self.0.scope(kind).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::writer::record::Recorder;

    #[tokio::test]
    async fn writes_are_logged_only_inside_a_logged_scope_and_still_sent() {
        let sent = Arc::new(Recorder::new(None));
        let tap = TapWriter(sent.clone());
        let target = ObjectRef {
            kind: kube::core::GroupVersionKind::gvk("", "v1", "ConfigMap"),
            namespace: Some("a".into()),
            name: "c".into(),
        };
        let caller = Caller::new("p");
        tap.delete(&caller, &target, &DeleteOptions::default()).await.unwrap();
        let log = Arc::new(WriteLog::default());
        logged(Some(log.clone()), tap.delete(&caller, &target, &DeleteOptions::default())).await.unwrap();
        logged(None, tap.delete(&caller, &target, &DeleteOptions::default())).await.unwrap();
        assert_eq!(log.take().len(), 1, "only the write inside the scope with a log");
        assert_eq!(sent.take().len(), 3, "every write went through");
    }
}
