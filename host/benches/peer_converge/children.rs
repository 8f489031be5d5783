//! Counts the children the controllers made (ResourceQuotas and NetworkPolicies labelled
//! managed-by namespace-defaults) from metadata watches, so convergence is seen as it happens
//! without polling lists.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures::StreamExt;
use k8s_openapi::api::core::v1::ResourceQuota;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::Resource;
use kube::api::Api;
use kube::core::PartialObjectMeta;
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::oneshot;

/// The label namespace-defaults and its peer put on every child.
pub const SELECTOR: &str = "app.kubernetes.io/managed-by=kubewasm-namespace-defaults";

/// Live counts of both kinds of children.
#[derive(Clone, Default)]
pub struct Children {
    quotas: Arc<AtomicUsize>,
    policies: Arc<AtomicUsize>,
}

impl Children {
    /// Starts both watches on `client` (spawned on the current runtime) and returns once both
    /// have listed.
    pub async fn watch(client: &kube::Client) -> Self {
        let children = Self::default();
        let (q, p) = (oneshot::channel(), oneshot::channel());
        tokio::spawn(count(Api::<PartialObjectMeta<ResourceQuota>>::all(client.clone()), children.quotas.clone(), q.0));
        tokio::spawn(count(
            Api::<PartialObjectMeta<NetworkPolicy>>::all(client.clone()),
            children.policies.clone(),
            p.0,
        ));
        let _ = q.1.await;
        let _ = p.1.await;
        children
    }

    /// (ResourceQuotas, NetworkPolicies) seen now.
    pub fn counts(&self) -> (usize, usize) {
        (self.quotas.load(Ordering::Relaxed), self.policies.load(Ordering::Relaxed))
    }
}

async fn count<K>(api: Api<K>, out: Arc<AtomicUsize>, listed: oneshot::Sender<()>)
where
    K: Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let mut listed = Some(listed);
    let mut seen = HashSet::new();
    let mut stream = watcher(api, watcher::Config::default().labels(SELECTOR)).default_backoff().boxed();
    while let Some(event) = stream.next().await {
        let Ok(event) = event else { continue }; // the watcher retries after its backoff
        let key = |m: &kube::core::ObjectMeta| (m.namespace.clone(), m.name.clone());
        match event {
            watcher::Event::Apply(o) | watcher::Event::InitApply(o) => {
                seen.insert(key(o.meta()));
            }
            watcher::Event::Delete(o) => {
                seen.remove(&key(o.meta()));
            }
            watcher::Event::Init => seen.clear(),
            watcher::Event::InitDone => {
                if let Some(tx) = listed.take() {
                    let _ = tx.send(());
                }
            }
        }
        out.store(seen.len(), Ordering::Relaxed);
    }
}
