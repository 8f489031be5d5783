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

use crate::plugin::api::{ApiCall, ApiReply, ApiWriter, CallError, Caller};

/// The writes one reconcile made (or tried to make), in order.
#[derive(Debug, Default)]
pub struct WriteLog(Mutex<Vec<ApiCall>>);

impl WriteLog {
    /// The writes logged so far.
    pub fn take(&self) -> Vec<ApiCall> {
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

fn note(write: impl FnOnce() -> ApiCall) {
    let _ = LOG.try_with(|log| {
        if let Some(log) = log {
            log.0.lock().push(write());
        }
    });
}

fn forget_last() {
    let _ = LOG.try_with(|log| {
        if let Some(log) = log {
            log.0.lock().pop();
        }
    });
}

/// Sends every write through `inner`, copying it first into the current reconcile's
/// [`WriteLog`], if [`logged`] set one.
pub struct TapWriter(pub Arc<dyn ApiWriter>);

#[async_trait]
impl ApiWriter for TapWriter {
    async fn send(&self, caller: &Caller, call: &ApiCall) -> Result<ApiReply, CallError> {
        if call.is_write() {
            note(|| call.clone());
        }
        let result = self.0.send(caller, call).await;
        if call.only_if_absent() && matches!(result, Err(CallError::Conflict(_))) {
            // Refused because the object exists: the host judges it again on the server's copy
            // and sends it again, and that one is the reconcile's write.
            forget_last();
        }
        result
    }

    async fn scope(&self, kind: &kube::core::GroupVersionKind) -> Result<crate::plugin::api::Scope, CallError> {
        self.0.scope(kind).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugin::api::{ApiWriterExt, DeleteOptions, ObjectRef, RecordingWriter};

    #[tokio::test]
    async fn writes_are_logged_only_inside_a_logged_scope_and_still_sent() {
        let sent = Arc::new(RecordingWriter::default());
        let tap = TapWriter(sent.clone());
        let target = ObjectRef {
            kind: kube::core::GroupVersionKind::gvk("", "v1", "ConfigMap"),
            namespace: Some("a".into()),
            name: "c".into(),
        };
        let caller = Caller::new("p");
        tap.delete(&caller, target.clone(), DeleteOptions::default()).await.unwrap();
        let log = Arc::new(WriteLog::default());
        logged(Some(log.clone()), tap.delete(&caller, target.clone(), DeleteOptions::default())).await.unwrap();
        logged(None, tap.delete(&caller, target.clone(), DeleteOptions::default())).await.unwrap();
        assert_eq!(log.take().len(), 1, "only the write inside the scope with a log");
        assert_eq!(sent.take().len(), 3, "every write went through");
    }

    #[tokio::test]
    async fn an_apply_sent_only_if_absent_and_refused_as_existing_is_not_the_reconciles_write() {
        let sent = Arc::new(RecordingWriter::default());
        let tap = TapWriter(sent.clone());
        let body =
            serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "a"}});
        let mut object = crate::plugin::api::TypedObject::from_json(body.to_string().as_bytes()).unwrap();
        object.only_if_absent = true;
        let locked = ApiCall::Apply { object: object.clone(), force: false };
        let caller = Caller::new("p");
        let log = Arc::new(WriteLog::default());
        sent.fail_with(CallError::Conflict("exists".into()));
        assert!(logged(Some(log.clone()), tap.send(&caller, &locked)).await.is_err());
        sent.fail_with(CallError::Invalid("bad".into()));
        assert!(logged(Some(log.clone()), tap.send(&caller, &locked)).await.is_err());
        assert_eq!(log.take(), [locked], "only the one refused for another reason is the reconcile's");
    }
}
