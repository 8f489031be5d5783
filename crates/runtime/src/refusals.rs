//! Refusals: requests the host allowed and the API server refused, per plugin, for its status.
//!
//! The host's authorizer and the API server's (RBAC, admission policies) are two layers; when
//! only the second refuses, the plugin's identity lacks a right or a policy holds, and its
//! reconciles fail while its status would say all is well. Each plugin's first refusal of each
//! kind of request (`apply ConfigMap`, `get Secret`; at most [`KEPT`]) since the host last took
//! them is kept here, so that a plugin refused over and over on one harmless request cannot hide
//! another, and the first is announced (its name, on a broadcast channel), so that whoever reports
//! the plugin's status (a WasmPlugin's conditions) says so.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::broadcast;

/// Announcements a subscriber may fall behind by before older ones are dropped (it then takes
/// every plugin's refusal on its next report, so nothing kept here is lost).
const ANNOUNCED: usize = 256;

/// Kinds of request kept per plugin between takes; later kinds are counted, not kept.
pub const KEPT: usize = 8;

/// Per plugin, its first refusal by the API server of each kind of request, not taken yet.
/// Cheap to clone: one per runtime, shared by every plugin version loaded with it.
#[derive(Clone)]
pub struct Refusals {
    first: Arc<Mutex<HashMap<String, Kept>>>,
    announce: broadcast::Sender<String>,
}

/// One plugin's refusals since the last take: the first of each kind of request, and how many
/// more kinds there were.
#[derive(Default)]
struct Kept {
    requests: Vec<String>,
    messages: Vec<String>,
    more: usize,
}

impl Default for Refusals {
    fn default() -> Self {
        Self { first: Arc::default(), announce: broadcast::channel(ANNOUNCED).0 }
    }
}

impl Refusals {
    /// Keeps `message` unless a refusal of the same kind of request (`request`: its verb and
    /// kind, `apply status Service`) is kept already, and announces the plugin when it is its
    /// first.
    pub(crate) fn record(&self, plugin: &str, request: &str, message: &str) {
        let mut first = self.first.lock();
        let news = !first.contains_key(plugin);
        let kept = first.entry(plugin.to_owned()).or_default();
        if kept.requests.iter().any(|r| r == request) {
            return;
        }
        if kept.messages.len() < KEPT {
            kept.requests.push(request.to_owned());
            kept.messages.push(message.to_owned());
        } else {
            kept.more += 1;
        }
        drop(first);
        if news {
            // No subscriber (no WasmPlugin source) is fine: the refusal waits to be taken.
            let _ = self.announce.send(plugin.to_owned());
        }
    }

    /// `plugin`'s refusals since the last take, one per kind of request, if any; the next
    /// refusal is announced again.
    pub fn take(&self, plugin: &str) -> Option<String> {
        let kept = self.first.lock().remove(plugin)?;
        let more = (kept.more > 0).then(|| format!("; and {} more kinds of request", kept.more));
        Some(format!("{}{}", kept.messages.join("; "), more.unwrap_or_default()))
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
    fn the_first_refusal_of_each_request_kind_is_kept_and_announced_once_until_taken() {
        let refusals = Refusals::default();
        let mut announced = refusals.subscribe();
        refusals.record("p", "delete ConfigMap", "delete ConfigMap a/b: forbidden");
        refusals.record("p", "delete ConfigMap", "delete ConfigMap a/c: forbidden");
        refusals.record("p", "get Secret", "get Secret a/s: forbidden");
        assert_eq!(announced.try_recv().unwrap(), "p");
        assert!(announced.try_recv().is_err(), "announced once");
        let taken = refusals.take("p").unwrap();
        assert_eq!(taken, "delete ConfigMap a/b: forbidden; get Secret a/s: forbidden", "a decoy hides nothing");
        assert_eq!(refusals.take("p"), None);
        refusals.record("p", "get Secret", "again");
        assert_eq!(announced.try_recv().unwrap(), "p", "a refusal after a take is news again");
    }

    #[test]
    fn past_the_kept_kinds_the_rest_are_counted() {
        let refusals = Refusals::default();
        for i in 0..KEPT + 2 {
            refusals.record("p", &format!("apply Kind{i}"), "forbidden");
        }
        assert!(refusals.take("p").unwrap().ends_with("; and 2 more kinds of request"));
    }

    #[test]
    fn plugins_are_kept_apart_and_no_subscriber_loses_nothing() {
        let refusals = Refusals::default();
        refusals.record("a", "get Secret", "x");
        refusals.record("b", "get Secret", "y");
        assert_eq!((refusals.take("b").as_deref(), refusals.take("a").as_deref()), (Some("y"), Some("x")));
    }
}
