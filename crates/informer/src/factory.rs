//! The shared informer factory: one informer per (kind, namespace, label selector, field
//! selector), handed to every consumer that asks (client-go `SharedInformerFactory`).

use std::{
    collections::HashMap,
    sync::{Arc, Weak},
};

use kube::{
    Client,
    api::{Api, ApiResource},
    core::GroupVersionKind,
    discovery::Scope,
};
use prometheus::Registry;

use super::shard::ShardGate;

use super::{
    Error, Result,
    discovery::Discovery,
    metrics::InformerMetrics,
    raw::RawObject,
    reflector::{ListStrategy, Reflector, ReflectorConfig, ReflectorShard},
    shared_informer::{Informer, InformerInner, Shared},
};

/// What to watch besides the kind: a namespace and server-side selectors. Part of the
/// informer's identity: consumers asking for equal params share one informer.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct InformerParams {
    namespace: Option<String>,
    label_selector: Option<String>,
    field_selector: Option<String>,
    sharded: bool,
}

impl InformerParams {
    /// List and watch only the namespaces in this replica's shard range (when the factory has a
    /// sharded [`ShardGate`]; otherwise ignored).
    #[must_use]
    pub fn sharded(mut self, sharded: bool) -> Self {
        self.sharded = sharded;
        self
    }

    /// Watch only this namespace (default: all namespaces).
    #[must_use]
    pub fn namespace(mut self, namespace: &str) -> Self {
        self.namespace = Some(namespace.to_owned());
        self
    }

    /// Server-side label selector.
    #[must_use]
    pub fn labels(mut self, selector: &str) -> Self {
        self.label_selector = Some(selector.to_owned()).filter(|s| !s.is_empty());
        self
    }

    /// Server-side field selector.
    #[must_use]
    pub fn fields(mut self, selector: &str) -> Self {
        self.field_selector = Some(selector.to_owned()).filter(|s| !s.is_empty());
        self
    }
}

/// An informer's identity in the factory.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct InformerKey {
    gvk: GroupVersionKind,
    params: InformerParams,
}

impl InformerKey {
    pub(crate) fn new(gvk: GroupVersionKind, params: InformerParams) -> Self {
        Self { gvk, params }
    }
}

struct FactoryInner {
    client: Client,
    config: ReflectorConfig,
    metrics: Arc<InformerMetrics>,
    /// Never held across an await: discovery runs outside it, so one slow kind does not
    /// hold up consumers of the others.
    informers: parking_lot::Mutex<HashMap<InformerKey, Weak<InformerInner>>>,
    /// Resolved kinds, shared with every other consumer of the host's discovery.
    discovery: Discovery,
    streaming: tokio::sync::OnceCell<bool>,
    /// The shard range sharded informers follow.
    gate: ShardGate,
}

/// Hands out shared informers for any kind, resolved through discovery at run time.
/// Cloning is cheap and clones share the informers.
#[derive(Clone)]
pub struct SharedInformerFactory {
    inner: Arc<FactoryInner>,
}

impl SharedInformerFactory {
    /// A factory whose metrics are registered on `registry` (once per registry).
    pub fn new(client: Client, registry: &Registry) -> Result<Self> {
        Self::with_config(client, registry, ReflectorConfig::default())
    }

    /// A factory with non-default list strategy, page size or managed-fields handling.
    pub fn with_config(client: Client, registry: &Registry, config: ReflectorConfig) -> Result<Self> {
        Ok(Self {
            inner: Arc::new(FactoryInner {
                discovery: Discovery::new(client.clone()),
                client,
                config,
                metrics: Arc::new(InformerMetrics::register(registry)?),
                informers: Default::default(),
                streaming: Default::default(),
                gate: ShardGate::default(),
            }),
        })
    }

    /// Whether informers created afterwards keep `metadata.managedFields` (default: no).
    #[must_use]
    pub fn keep_managed_fields(self, keep: bool) -> Self {
        let mut config = self.inner.config.clone();
        config.keep_managed_fields = keep;
        self.rebuilt(config)
    }

    /// Informers created afterwards keep, per object, the `managedFields` entries of the field
    /// managers whose name starts with `prefix` (default: none).
    #[must_use]
    pub fn keep_managers(self, prefix: &str) -> Self {
        let mut config = self.inner.config.clone();
        config.keep_managers = Some(prefix.into());
        self.rebuilt(config)
    }

    /// Sets the initial list strategy for informers created afterwards.
    #[must_use]
    pub fn list_strategy(self, strategy: ListStrategy) -> Self {
        let mut config = self.inner.config.clone();
        config.list_strategy = strategy;
        self.rebuilt(config)
    }

    /// Kinds are resolved through `discovery`, the process's one discovery cache.
    #[must_use]
    pub fn with_discovery(self, discovery: Discovery) -> Self {
        let config = self.inner.config.clone();
        let mut rebuilt = self.rebuilt(config);
        if let Some(inner) = Arc::get_mut(&mut rebuilt.inner) {
            inner.discovery = discovery;
        }
        rebuilt
    }

    /// Informers created afterwards with [`InformerParams::sharded`] follow `gate`'s range.
    #[must_use]
    pub fn shard_gate(self, gate: ShardGate) -> Self {
        let config = self.inner.config.clone();
        let mut rebuilt = self.rebuilt(config);
        if let Some(inner) = Arc::get_mut(&mut rebuilt.inner) {
            inner.gate = gate;
        }
        rebuilt
    }

    fn rebuilt(self, config: ReflectorConfig) -> Self {
        let inner = &self.inner;
        Self {
            inner: Arc::new(FactoryInner {
                client: inner.client.clone(),
                config,
                metrics: inner.metrics.clone(),
                informers: Default::default(),
                discovery: inner.discovery.clone(),
                streaming: Default::default(),
                gate: inner.gate.clone(),
            }),
        }
    }

    /// The informer for `gvk` across all namespaces, without selectors.
    pub async fn informer_for(&self, gvk: &GroupVersionKind) -> Result<Informer> {
        self.informer(gvk, InformerParams::default()).await
    }

    /// The informer for `gvk` and `params`: the running one if some consumer holds it, else a
    /// new one whose watch starts now. Unknown kinds are looked up through discovery each time,
    /// so a CRD installed after start becomes watchable.
    pub async fn informer(&self, gvk: &GroupVersionKind, params: InformerParams) -> Result<Informer> {
        let key = InformerKey::new(gvk.clone(), params);
        if let Some(inner) = self.inner.informers.lock().get(&key).and_then(Weak::upgrade) {
            return Ok(Informer { inner });
        }
        let (resource, scope) = self.resolve(gvk).await?;
        let streaming = self.streaming().await;
        let client = self.inner.client.clone();
        let api = match (&key.params.namespace, scope) {
            (Some(ns), Scope::Namespaced) => Api::namespaced_with(client, ns, &resource),
            (Some(ns), Scope::Cluster) => {
                return Err(Error::ClusterScoped { gvk: gvk.clone(), namespace: ns.clone() });
            }
            (None, _) => Api::<RawObject>::all_with(client, &resource),
        };
        let gate = &self.inner.gate;
        let shard = match (key.params.sharded, gate.caching(), gate.register_informer()) {
            (true, Some(caching), Some(listed)) => Some(ReflectorShard {
                caching,
                listed,
                client_side_filter: gate.client_side_filter(&super::metrics::kind_label(gvk)),
                namespace: key.params.namespace.clone(),
            }),
            _ => None,
        };
        let reflector = Reflector {
            api,
            resource,
            label_selector: key.params.label_selector.clone(),
            field_selector: key.params.field_selector.clone(),
            config: self.inner.config.clone(),
            streaming,
            shard,
        };
        let mut informers = self.inner.informers.lock();
        // Another consumer may have started it while we were resolving the kind.
        if let Some(inner) = informers.get(&key).and_then(Weak::upgrade) {
            return Ok(Informer { inner });
        }
        informers.retain(|_, w| w.strong_count() > 0);
        let shared = Arc::new(Shared::new(gvk.clone(), self.inner.metrics.clone()));
        let task = tokio::spawn(reflector.run(shared.clone())).abort_handle();
        let inner = Arc::new(InformerInner { shared, key: key.clone(), reflector: task });
        informers.insert(key, Arc::downgrade(&inner));
        Ok(Informer { inner })
    }

    /// Number of informers with a live consumer.
    pub async fn running(&self) -> usize {
        self.inner.informers.lock().values().filter(|w| w.strong_count() > 0).count()
    }

    /// The discovery cache this factory resolves kinds with; hand it to every other consumer.
    pub fn discovery(&self) -> &Discovery {
        &self.inner.discovery
    }

    async fn resolve(&self, gvk: &GroupVersionKind) -> Result<(ApiResource, Scope)> {
        let found = self
            .inner
            .discovery
            .resolve(gvk)
            .await
            .map_err(|source| Error::KindNotFound { gvk: gvk.clone(), source: Box::new(source) })?;
        Ok((found.resource, found.scope))
    }

    /// Whether new reflectors start with a streaming list.
    async fn streaming(&self) -> bool {
        match self.inner.config.list_strategy {
            ListStrategy::Streaming => true,
            ListStrategy::Paginated => false,
            ListStrategy::Auto => {
                *self
                    .inner
                    .streaming
                    .get_or_init(|| async {
                        match self.inner.client.apiserver_version().await {
                            Ok(info) => serves_streaming_lists(&info.major, &info.minor),
                            Err(err) => {
                                tracing::debug!(error = %err, "no server version; using paginated lists");
                                false
                            }
                        }
                    })
                    .await
            }
        }
    }
}

/// WatchList (streaming lists) is on by default from Kubernetes v1.32 (KEP-3157 beta).
fn serves_streaming_lists(major: &str, minor: &str) -> bool {
    let num = |s: &str| s.trim_end_matches(|c: char| !c.is_ascii_digit()).parse::<u32>().ok();
    matches!((num(major), num(minor)), (Some(1), Some(m)) if m >= 32) || num(major).is_some_and(|m| m > 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streaming_lists_are_tried_from_kubernetes_1_32() {
        assert!(serves_streaming_lists("1", "37"));
        assert!(serves_streaming_lists("1", "32+"));
        assert!(!serves_streaming_lists("1", "31"));
        assert!(!serves_streaming_lists("", ""));
    }

    #[tokio::test]
    async fn a_discovery_that_hangs_does_not_lock_the_factory() {
        // An API server that accepts connections and never answers.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let (asked, mut discovery_asked) = tokio::sync::mpsc::unbounded_channel();
        let silent = tokio::spawn(async move {
            let mut open = Vec::new();
            while let Ok((stream, _)) = listener.accept().await {
                open.push(stream);
                let _ = asked.send(());
            }
        });
        let client = Client::try_from(kube::Config::new(url.parse().unwrap())).unwrap();
        let factory = SharedInformerFactory::new(client, &Registry::new()).unwrap();
        let hanging = tokio::spawn({
            let factory = factory.clone();
            async move { factory.informer_for(&GroupVersionKind::gvk("example.com", "v1", "Slow")).await.map(drop) }
        });
        discovery_asked.recv().await.expect("discovery connects to the server");
        assert!(!hanging.is_finished(), "discovery is still waiting for the silent server");
        let running = tokio::time::timeout(std::time::Duration::from_secs(2), factory.running()).await;
        assert_eq!(running.ok(), Some(0), "the factory answered while discovery was in flight");
        hanging.abort();
        silent.abort();
    }

    #[test]
    fn params_with_equal_selectors_are_the_same_informer() {
        let a = InformerParams::default().namespace("x").labels("app=web");
        let b = InformerParams::default().labels("app=web").namespace("x");
        assert_eq!(a, b);
        assert_eq!(InformerParams::default().labels(""), InformerParams::default());
    }
}
