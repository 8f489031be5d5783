//! Refusals: requests the host allowed and the API server refused, per plugin, for its status.
//!
//! The host's authorizer and the API server's (RBAC, admission policies) are two layers; when
//! only the second refuses, the plugin's identity lacks a right or a policy holds, and its
//! reconciles fail while its status would say all is well. Each plugin's first such refusal since
//! the host last took it is kept here and announced (its name, on a broadcast channel), so that
//! whoever reports the plugin's status (a WasmPlugin's conditions) says so.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::broadcast;

/// Announcements a subscriber may fall behind by before older ones are dropped (it then takes
/// every plugin's refusal on its next report, so nothing kept here is lost).
const ANNOUNCED: usize = 256;

/// Per plugin, its first refusal by the API server not taken yet. Cheap to clone: one per
/// runtime, shared by every plugin version loaded with it.
#[derive(Clone)]
pub struct Refusals {
    first: Arc<Mutex<HashMap<String, String>>>,
    announce: broadcast::Sender<String>,
}

impl Default for Refusals {
    fn default() -> Self {
        Self { first: Arc::default(), announce: broadcast::channel(ANNOUNCED).0 }
    }
}

impl Refusals {
    /// Keeps `message` as `plugin`'s refusal unless one is kept already, and announces the
    /// plugin when it is the first.
    pub(crate) fn record(&self, plugin: &str, message: &str) {
        let mut first = self.first.lock();
        if first.contains_key(plugin) {
            return;
        }
        first.insert(plugin.to_owned(), message.to_owned());
        drop(first);
        // No subscriber (no WasmPlugin source) is fine: the refusal waits to be taken.
        let _ = self.announce.send(plugin.to_owned());
    }

    /// `plugin`'s first refusal since the last take, if any; the next refusal is announced again.
    pub fn take(&self, plugin: &str) -> Option<String> {
        self.first.lock().remove(plugin)
    }

    /// The names of plugins with a new refusal, as they happen.
    pub fn subscribe(&self) -> broadcast::Receiver<String> {
        self.announce.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_refusal_is_kept_and_announced_once_until_taken() {
        let refusals = Refusals::default();
        let mut announced = refusals.subscribe();
        refusals.record("p", "delete ConfigMap a/b: forbidden");
        refusals.record("p", "delete ConfigMap a/c: forbidden");
        assert_eq!(announced.try_recv().unwrap(), "p");
        assert!(announced.try_recv().is_err(), "announced once");
        assert_eq!(refusals.take("p").as_deref(), Some("delete ConfigMap a/b: forbidden"));
        assert_eq!(refusals.take("p"), None);
        refusals.record("p", "again");
        assert_eq!(announced.try_recv().unwrap(), "p", "a refusal after a take is news again");
    }

    #[test]
    fn plugins_are_kept_apart_and_no_subscriber_loses_nothing() {
        let refusals = Refusals::default();
        refusals.record("a", "x");
        refusals.record("b", "y");
        assert_eq!((refusals.take("b").as_deref(), refusals.take("a").as_deref()), (Some("y"), Some("x")));
    }
}
