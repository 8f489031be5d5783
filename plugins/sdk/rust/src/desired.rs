//! Desired state (contract 0.3): a [`DesiredState`] plugin says what should exist for a key —
//! its children and its status — and the host makes it so: it applies the children as the
//! plugin (concurrently, none sent that would change nothing), prunes what the plugin made for
//! the key and no longer returns (per owned kind, [`Prune`]), then applies the status.

use std::time::Duration;

use serde::Serialize;

use crate::{Action, Error, Gvk, ObjectKey, Registration, Request, Result};

/// What should exist for one key, built by value:
/// `Desired::new().child(&config_map).child(&quota).status(&status)`.
#[derive(Clone, Debug, Default)]
#[must_use]
pub struct Desired {
    pub(crate) children: Vec<Vec<u8>>,
    pub(crate) status: Option<Vec<u8>>,
    pub(crate) action: Option<Action>,
    /// The first object that did not serialize: the reconcile fails with it.
    pub(crate) error: Option<String>,
}

impl Desired {
    /// Nothing should exist: every child the plugin made for the key is pruned.
    pub fn new() -> Self {
        Self::default()
    }

    /// `object` should exist as given (a full object with apiVersion, kind, metadata.name and,
    /// for namespaced kinds, metadata.namespace). Without a controller ownerReference it gets
    /// one to the key's object when Kubernetes allows it (same namespace, or a cluster-scoped
    /// owner), so [`controller_reference`](crate::controller_reference) is optional.
    pub fn child<K: Serialize>(mut self, object: &K) -> Self {
        match serde_json::to_vec(object) {
            Ok(bytes) => self.children.push(bytes),
            Err(e) => {
                self.error.get_or_insert_with(|| format!("a desired child: {e}"));
            }
        }
        self
    }

    /// Every object of `objects` should exist, as [`child`](Self::child).
    pub fn children<'a, K: Serialize + 'a>(self, objects: impl IntoIterator<Item = &'a K>) -> Self {
        objects.into_iter().fold(self, Self::child)
    }

    /// The key object's `status` should be `status` (the field's value, e.g. a k8s-openapi
    /// `DeploymentStatus` or a `serde_json::Value` object), applied once every child is.
    pub fn status<S: Serialize>(mut self, status: &S) -> Self {
        match serde_json::to_vec(status) {
            Ok(bytes) => self.status = Some(bytes),
            Err(e) => {
                self.error.get_or_insert_with(|| format!("the desired status: {e}"));
            }
        }
        self
    }

    /// Reconcile the key again after `after`, once the state is made so (a periodic re-check).
    pub fn requeue_after(mut self, after: Duration) -> Self {
        self.action = Some(Action::RequeueAfter(after));
        self
    }
}

/// A reconciler that says what should exist. Every call runs in a fresh instance: keep no
/// state between calls. The imperative functions ([`client`](crate::client),
/// [`events`](crate::events)) stay available for what a desired state cannot say.
pub trait DesiredState {
    /// What the plugin reconciles, owns, watches, reads and writes. Called once at load.
    fn describe() -> Registration;
    /// What should exist for one key; `None` when the reconcile wrote what it wanted itself
    /// (or the key's object is gone and nothing is to be done). An `Err` is retried as
    /// [`Reconciler::reconcile`](crate::Reconciler::reconcile)'s is.
    fn desired(request: Request) -> Result<Option<Desired>>;
    /// For a change to `object` of a watched `kind`, the keys to reconcile. Default: none.
    fn map(kind: Gvk, object: &[u8]) -> Result<Vec<ObjectKey>> {
        let _ = (kind, object);
        Ok(Vec::new())
    }
}

impl Desired {
    /// The desired state as the contract carries it, or the error of an object that did not
    /// serialize.
    pub(crate) fn into_parts(self) -> Result<(crate::bindings::DesiredState, Action)> {
        if let Some(e) = self.error {
            return Err(Error::Json(e));
        }
        let state = crate::bindings::DesiredState { children: self.children, status: self.status };
        Ok((state, self.action.unwrap_or(Action::Done)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn children_and_status_are_carried_as_json_and_the_action_defaults_to_done() {
        let cm = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}});
        let (state, action) =
            Desired::new().child(&cm).status(&serde_json::json!({"ready": true})).into_parts().unwrap();
        assert_eq!(state.children, vec![serde_json::to_vec(&cm).unwrap()]);
        assert_eq!(state.status.as_deref(), Some(br#"{"ready":true}"#.as_slice()));
        assert_eq!(action, Action::Done);
        let (_, action) = Desired::new().requeue_after(Duration::from_secs(5)).into_parts().unwrap();
        assert_eq!(action, Action::RequeueAfter(Duration::from_secs(5)));
    }

    #[test]
    fn an_object_that_does_not_serialize_fails_the_reconcile() {
        let bad = std::collections::HashMap::from([((1, 2), "a map with non-string keys is no JSON object")]);
        let err = Desired::new().child(&bad).into_parts().unwrap_err();
        assert!(matches!(&err, Error::Json(m) if m.starts_with("a desired child")), "{err:?}");
    }
}
