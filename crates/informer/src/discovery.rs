//! One discovery cache per process: each kind's resource (plural, scope) looked up once by
//! group, version and kind, shared by the informer factory, the plugins' writer and the
//! controllers.
//!
//! Hand-written over kube's `discovery::pinned_kind`: kube's `Discovery` walks every group at
//! once and is rebuilt whole, and `pinned_kind` remembers nothing. Only answers are kept, so a
//! kind not served yet (a CRD installed later) is looked up again on the next request; a
//! consumer that finds a kept answer stale (the API server no longer serves the resource, a CRD
//! changed) calls [`Discovery::forget`].

use std::collections::HashMap;
use std::sync::Arc;

use kube::Client;
use kube::core::GroupVersionKind;
use kube::discovery::{self, ApiResource, Scope};
use parking_lot::Mutex;

/// A kind as the API server serves it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resolved {
    /// Group, version, kind and plural, for building URLs.
    pub resource: ApiResource,
    /// Namespaced or cluster-scoped.
    pub scope: Scope,
}

/// The discovery cache; clones share it.
#[derive(Clone)]
pub struct Discovery {
    client: Client,
    resolved: Arc<Mutex<HashMap<GroupVersionKind, Resolved>>>,
    /// Plurals by group and kind, any version (a CRD names its resource once for all versions).
    plurals: Arc<Mutex<HashMap<(String, String), String>>>,
}

impl Discovery {
    /// An empty cache asking the API server through `client`.
    pub fn new(client: Client) -> Self {
        Self { client, resolved: Arc::default(), plurals: Arc::default() }
    }

    /// How the API server serves `kind` (this exact version), from the cache or by asking it.
    /// The lock is never held across the request, so one slow group does not hold up others.
    pub async fn resolve(&self, kind: &GroupVersionKind) -> Result<Resolved, kube::Error> {
        if let Some(found) = self.resolved.lock().get(kind) {
            return Ok(found.clone());
        }
        let (resource, caps) = discovery::pinned_kind(&self.client, kind).await?;
        let found = Resolved { resource, scope: caps.scope };
        self.resolved.lock().insert(kind.clone(), found.clone());
        Ok(found)
    }

    /// The resource name of `kind` in `group` at whatever version the group prefers, as RBAC
    /// rules name it; `None` if the API server does not serve the kind.
    pub async fn plural(&self, group: &str, kind: &str) -> Result<Option<String>, kube::Error> {
        let key = (group.to_owned(), kind.to_owned());
        if let Some(found) = self.plurals.lock().get(&key) {
            return Ok(Some(found.clone()));
        }
        let served = match discovery::group(&self.client, group).await {
            Ok(served) => served,
            Err(kube::Error::Api(status)) if status.code == 404 => return Ok(None),
            Err(other) => return Err(other),
        };
        let Some((resource, _)) = served.recommended_kind(kind) else { return Ok(None) };
        self.plurals.lock().insert(key, resource.plural.clone());
        Ok(Some(resource.plural))
    }

    /// Drops what is kept for every version of `kind`'s group and kind; the next request asks
    /// the API server again.
    pub fn forget(&self, kind: &GroupVersionKind) {
        self.resolved.lock().retain(|k, _| !(k.group == kind.group && k.kind == kind.kind));
        self.plurals.lock().remove(&(kind.group.clone(), kind.kind.clone()));
    }

    /// Drops what is kept for every kind of `group` (a CRD of the group changed).
    pub fn forget_group(&self, group: &str) {
        self.resolved.lock().retain(|k, _| k.group != group);
        self.plurals.lock().retain(|(g, _), _| g != group);
    }

    /// The client discovery asks through.
    pub fn client(&self) -> &Client {
        &self.client
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn discovery() -> Discovery {
        // Never contacted: the tests only fill and drop entries.
        let client = Client::try_from(kube::Config::new("http://127.0.0.1:1".parse().unwrap())).unwrap();
        Discovery::new(client)
    }

    fn keep(d: &Discovery, group: &str, version: &str, kind: &str) -> GroupVersionKind {
        let gvk = GroupVersionKind::gvk(group, version, kind);
        let resolved = Resolved { resource: ApiResource::from_gvk(&gvk), scope: Scope::Namespaced };
        d.resolved.lock().insert(gvk.clone(), resolved);
        gvk
    }

    #[tokio::test]
    async fn a_kept_kind_is_answered_per_version_without_asking() {
        let d = discovery();
        let v1 = keep(&d, "x.test", "v1", "Widget");
        let v2 = keep(&d, "x.test", "v2", "Widget");
        assert_eq!(d.resolve(&v1).await.unwrap().resource.version, "v1");
        assert_eq!(d.resolve(&v2).await.unwrap().resource.version, "v2");
    }

    #[tokio::test]
    async fn forgetting_a_kind_drops_all_its_versions_and_only_them() {
        let d = discovery();
        let (v1, v2) = (keep(&d, "x.test", "v1", "Widget"), keep(&d, "x.test", "v2", "Widget"));
        let other = keep(&d, "x.test", "v1", "Gadget");
        d.forget(&v1);
        assert!(d.resolve(&v1).await.is_err() && d.resolve(&v2).await.is_err(), "asked the (absent) server");
        assert!(d.resolve(&other).await.is_ok());
        d.forget_group("x.test");
        assert!(d.resolve(&other).await.is_err());
    }
}
