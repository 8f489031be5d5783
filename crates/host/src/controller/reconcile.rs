//! What a controller's workers call: a plugin's reconcile and the little they need to know of it.

use super::ObjectKey;
use crate::plugin::{Action, CallFailed, Plugin};

/// One version of what [`Workers`](super::Workers) serve: a loaded [`Plugin`] in the host, a
/// fake in the workers' tests.
pub trait Reconcile: Send + Sync + 'static {
    /// The controller's name (the plugin's).
    fn name(&self) -> &str;

    /// The version's revision, for the reconcile's span.
    fn revision(&self) -> u64;

    /// How many reconciles of this version may run at once.
    fn max_concurrent(&self) -> u32;

    /// Whether this version may see `key` of its for kind (a confined plugin sees its
    /// namespaces only).
    fn sees_key(&self, key: &ObjectKey) -> bool;

    /// Reconciles `key`, which failed `attempt` times in a row before.
    fn reconcile(&self, key: &ObjectKey, attempt: u32) -> impl Future<Output = Result<Action, CallFailed>> + Send;
}

impl Reconcile for Plugin {
    fn name(&self) -> &str {
        Plugin::name(self)
    }

    fn revision(&self) -> u64 {
        Plugin::revision(self)
    }

    fn max_concurrent(&self) -> u32 {
        Plugin::max_concurrent(self)
    }

    fn sees_key(&self, key: &ObjectKey) -> bool {
        self.sees(&self.registration().for_kind, key.namespace(), key.name())
    }

    fn reconcile(&self, key: &ObjectKey, attempt: u32) -> impl Future<Output = Result<Action, CallFailed>> + Send {
        Plugin::reconcile(self, key, attempt)
    }
}
