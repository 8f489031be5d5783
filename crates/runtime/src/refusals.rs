//! Refusals: requests refused for a reason the plugin's status must show, per plugin.
//!
//! Two refusals leave a plugin failing every reconcile while its status would say all is well.
//! The host's authorizer and the API server's (RBAC, admission policies) are two layers; when
//! only the second refuses ([`Cause::Forbidden`]), the plugin's identity lacks a right or a
//! policy holds. And a write of an object another plugin made ([`Cause::Held`]) waits for an
//! operator to hand it over. Each plugin's first refusal of each kind of request (`apply
//! ConfigMap`, `get Secret`; at most [`KEPT`] per cause) since the host last took them is kept
//! here, so that a plugin refused over and over on one harmless request cannot hide another, and
//! the first is announced (its name, on a broadcast channel), so that whoever reports the
//! plugin's status (a WasmPlugin's conditions) says so.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::broadcast;

/// Announcements a subscriber may fall behind by before older ones are dropped (it then takes
/// every plugin's refusal on its next report, so nothing kept here is lost).
const ANNOUNCED: usize = 256;

/// Kinds of request kept per plugin and cause between takes; later kinds are counted, not kept.
pub const KEPT: usize = 8;

/// Why a refusal is kept for the plugin's status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cause {
    /// The API server refused a request the host allowed.
    Forbidden,
    /// The host refused a write of an object another plugin made.
    Held,
}

/// Per plugin, its first refusal of each kind of request, by cause, not taken yet.
/// Cheap to clone: one per runtime, shared by every plugin version loaded with it.
#[derive(Clone)]
pub struct Refusals {
    first: Arc<Mutex<HashMap<String, [Kept; 2]>>>,
    announce: broadcast::Sender<String>,
}

/// One plugin's refusals of one cause since the last take: the first of each kind of request,
/// and how many more kinds there were.
#[derive(Default)]
struct Kept {
    requests: Vec<String>,
    messages: Vec<String>,
    more: usize,
}

impl Kept {
    fn summary(self) -> Option<String> {
        if self.messages.is_empty() {
            return None;
        }
        let more = (self.more > 0).then(|| format!("; and {} more kinds of request", self.more));
        Some(format!("{}{}", self.messages.join("; "), more.unwrap_or_default()))
    }
}

/// One plugin's refusals since the last take, each cause's as one message.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Taken {
    /// Refused by the API server ([`Cause::Forbidden`]).
    pub forbidden: Option<String>,
    /// Refused as made by another plugin ([`Cause::Held`]).
    pub held: Option<String>,
}

impl Default for Refusals {
    fn default() -> Self {
        Self { first: Arc::default(), announce: broadcast::channel(ANNOUNCED).0 }
    }
}

impl Refusals {
    /// Keeps `message` unless a refusal of the same cause and kind of request (`request`: its
    /// verb and kind, `apply status Service`) is kept already, and announces the plugin when it
    /// is its first.
    pub(crate) fn record(&self, plugin: &str, cause: Cause, request: &str, message: &str) {
        let mut first = self.first.lock();
        let news = !first.contains_key(plugin);
        let kept = &mut first.entry(plugin.to_owned()).or_default()[cause as usize];
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

    /// `plugin`'s refusals since the last take, one per cause and kind of request; the next
    /// refusal is announced again.
    pub fn take(&self, plugin: &str) -> Taken {
        let Some([forbidden, held]) = self.first.lock().remove(plugin) else { return Taken::default() };
        Taken { forbidden: forbidden.summary(), held: held.summary() }
    }

    /// The names of plugins with a new refusal, as they happen.
    pub fn subscribe(&self) -> broadcast::Receiver<String> {
        self.announce.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::Cause::{Forbidden, Held};
    use super::*;

    #[test]
    fn the_first_refusal_of_each_request_kind_is_kept_and_announced_once_until_taken() {
        let refusals = Refusals::default();
        let mut announced = refusals.subscribe();
        refusals.record("p", Forbidden, "delete ConfigMap", "delete ConfigMap a/b: forbidden");
        refusals.record("p", Forbidden, "delete ConfigMap", "delete ConfigMap a/c: forbidden");
        refusals.record("p", Forbidden, "get Secret", "get Secret a/s: forbidden");
        assert_eq!(announced.try_recv().unwrap(), "p");
        assert!(announced.try_recv().is_err(), "announced once");
        let taken = refusals.take("p").forbidden.unwrap();
        assert_eq!(taken, "delete ConfigMap a/b: forbidden; get Secret a/s: forbidden", "a decoy hides nothing");
        assert_eq!(refusals.take("p"), Taken::default());
        refusals.record("p", Forbidden, "get Secret", "again");
        assert_eq!(announced.try_recv().unwrap(), "p", "a refusal after a take is news again");
    }

    #[test]
    fn past_the_kept_kinds_the_rest_are_counted() {
        let refusals = Refusals::default();
        for i in 0..KEPT + 2 {
            refusals.record("p", Forbidden, &format!("apply Kind{i}"), "forbidden");
        }
        assert!(refusals.take("p").forbidden.unwrap().ends_with("; and 2 more kinds of request"));
    }

    #[test]
    fn plugins_are_kept_apart_and_no_subscriber_loses_nothing() {
        let refusals = Refusals::default();
        refusals.record("a", Forbidden, "get Secret", "x");
        refusals.record("b", Forbidden, "get Secret", "y");
        assert_eq!((refusals.take("b").forbidden, refusals.take("a").forbidden), (Some("y".into()), Some("x".into())));
    }

    #[test]
    fn a_held_name_is_kept_apart_from_the_api_servers_refusals_and_counted_on_its_own() {
        let refusals = Refusals::default();
        let mut announced = refusals.subscribe();
        refusals.record("p", Held, "q ConfigMap", "made by q");
        refusals.record("p", Forbidden, "q ConfigMap", "forbidden");
        for i in 0..KEPT + 1 {
            refusals.record("p", Held, &format!("q Kind{i}"), "made by q");
        }
        assert_eq!(announced.try_recv().unwrap(), "p");
        assert!(announced.try_recv().is_err(), "one announcement for both causes");
        let taken = refusals.take("p");
        assert_eq!(taken.forbidden.as_deref(), Some("forbidden"), "the same request under another cause is kept");
        assert!(taken.held.unwrap().ends_with("; and 2 more kinds of request"), "the forbidden one is not counted");
    }
}
