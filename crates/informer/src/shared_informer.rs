//! A shared informer: one watch feeding one indexed cache and any number of event handlers
//! (client-go `SharedIndexInformer`).

use std::{collections::HashSet, sync::Arc, time::Duration};

use kube::core::GroupVersionKind;
use parking_lot::Mutex;
use tokio::{sync::watch, task::AbortHandle};

use super::{
    Error, Indexers, Result,
    factory::InformerKey,
    handler::{Listener, ResourceEventHandler},
    metrics::{InformerMetrics, kind_label},
    object::CachedObject,
    store::Store,
};

/// State shared by the reflector task, the handler tasks and the handles.
pub(crate) struct Shared {
    pub(crate) gvk: GroupVersionKind,
    pub(crate) kind: String,
    pub(crate) store: Arc<Store>,
    /// The handlers' buffers. Also the dispatch lock: every store change and its fan-out to the
    /// buffers happen under it, so a new subscriber's replay can neither miss nor repeat one.
    listeners: Mutex<Vec<Arc<Listener>>>,
    synced: watch::Sender<bool>,
    /// The last list or watch error, until the next successful list.
    last_error: Mutex<Option<String>>,
    pub(crate) metrics: Arc<InformerMetrics>,
}

impl Shared {
    pub(crate) fn new(gvk: GroupVersionKind, metrics: Arc<InformerMetrics>) -> Self {
        Self {
            kind: kind_label(&gvk),
            gvk,
            store: Arc::new(Store::new()),
            listeners: Mutex::new(Vec::new()),
            synced: watch::Sender::new(false),
            last_error: Mutex::new(None),
            metrics,
        }
    }

    pub(crate) fn has_synced(&self) -> bool {
        *self.synced.borrow()
    }

    pub(crate) fn mark_synced(&self) {
        *self.last_error.lock() = None;
        self.synced.send_replace(true);
    }

    pub(crate) fn record_error(&self, error: String) {
        *self.last_error.lock() = Some(error);
    }

    /// Applies an added or modified object. `from_list` marks objects of a (re)list, which are
    /// not re-announced when their resourceVersion did not change.
    pub(crate) fn apply(&self, obj: Arc<CachedObject>, from_list: bool) {
        let listeners = self.listeners.lock();
        if from_list
            && let Some(old) = self.store.get_by_key(obj.key())
            && old.meta().resource_version == obj.meta().resource_version
        {
            return;
        }
        let old = self.store.upsert(obj.clone());
        if old.is_none() {
            self.metrics.objects.with_label_values(&[&self.kind]).inc();
        }
        let initial = from_list && !self.has_synced();
        for l in listeners.iter() {
            l.upserted(old.as_ref(), &obj, initial);
        }
    }

    /// Applies a watch `DELETED` event; `obj` is the final state from the server.
    pub(crate) fn remove(&self, obj: Arc<CachedObject>) {
        let listeners = self.listeners.lock();
        if self.store.delete(obj.key()).is_some() {
            self.metrics.objects.with_label_values(&[&self.kind]).dec();
        }
        for l in listeners.iter() {
            l.deleted(&obj, false);
        }
    }

    /// After a (re)list: drops every cached object the list did not contain and tells the
    /// handlers with `final_state_unknown = true`.
    pub(crate) fn replace_done(&self, listed: &HashSet<Arc<str>>) {
        let listeners = self.listeners.lock();
        for gone in self.store.retain_keys(listed) {
            self.metrics.objects.with_label_values(&[&self.kind]).dec();
            for l in listeners.iter() {
                l.deleted(&gone, true);
            }
        }
    }

    /// Registers a buffer, first filling it with a synthetic add for every cached object.
    fn subscribe(&self, listener: Arc<Listener>) {
        let mut listeners = self.listeners.lock();
        for obj in self.store.list() {
            listener.upserted(None, &obj, true);
        }
        listeners.push(listener);
    }

    fn unsubscribe(&self, listener: &Arc<Listener>) {
        self.listeners.lock().retain(|l| !Arc::ptr_eq(l, listener));
    }

    fn resync(&self, listener: &Listener) {
        let _dispatch = self.listeners.lock();
        for obj in self.store.list() {
            listener.resync(&obj);
        }
    }
}

/// Owns the reflector task; the last [`Informer`] handle to go stops the watch.
pub(crate) struct InformerInner {
    pub(crate) shared: Arc<Shared>,
    pub(crate) key: InformerKey,
    pub(crate) reflector: AbortHandle,
}

impl Drop for InformerInner {
    fn drop(&mut self) {
        self.reflector.abort();
        let cached = i64::try_from(self.shared.store.len()).unwrap_or(i64::MAX);
        self.shared.metrics.objects.with_label_values(&[&self.shared.kind]).sub(cached);
        tracing::debug!(kind = %self.shared.kind, key = ?self.key, "last consumer gone; informer stopped");
    }
}

/// A handle on a shared informer. Cloning is cheap; the watch runs while any handle or
/// [`HandlerRegistration`] is alive.
#[derive(Clone)]
pub struct Informer {
    pub(crate) inner: Arc<InformerInner>,
}

impl Informer {
    /// The kind this informer watches.
    pub fn gvk(&self) -> &GroupVersionKind {
        &self.inner.shared.gvk
    }

    /// The cache (client-go `GetIndexer`): reads, index queries, `add_indexers`.
    pub fn store(&self) -> &Arc<Store> {
        &self.inner.shared.store
    }

    /// Adds indexes to the cache, backfilling objects already cached; allowed at any time.
    pub fn add_indexers(&self, indexers: Indexers) -> Result<()> {
        self.store().add_indexers(indexers)
    }

    /// Removes indexes added with [`add_indexers`](Self::add_indexers).
    pub fn remove_indexers<'a>(&self, names: impl IntoIterator<Item = &'a str>) {
        self.store().remove_indexers(names)
    }

    /// Whether the first list has been fully applied to the cache.
    pub fn has_synced(&self) -> bool {
        self.inner.shared.has_synced()
    }

    /// The last list or watch error since the last complete list (e.g. `403 Forbidden` when
    /// the host may not list the kind): why a cache that has not synced is still waiting.
    pub fn last_error(&self) -> Option<String> {
        self.inner.shared.last_error.lock().clone()
    }

    /// Waits until the first list has been fully applied to the cache (client-go
    /// `WaitForCacheSync`); wrap it in a timeout if the API server may be unreachable.
    pub async fn wait_for_sync(&self) -> Result<()> {
        let mut rx = self.inner.shared.synced.subscribe();
        rx.wait_for(|s| *s).await.map(|_| ()).map_err(|_| Error::Stopped)
    }

    /// Subscribes a handler (client-go `AddEventHandler`). It first receives an `add` for every
    /// object already cached, then every change. Must be called within a tokio runtime.
    pub fn add_event_handler(&self, handler: impl ResourceEventHandler) -> HandlerRegistration {
        self.subscribe(Arc::new(handler), None)
    }

    /// Like [`add_event_handler`](Self::add_event_handler), and every `resync` also
    /// re-delivers `update(obj, obj)` for each cached object (client-go
    /// `AddEventHandlerWithResyncPeriod`; off by default, as in controller-runtime).
    pub fn add_event_handler_with_resync(
        &self,
        handler: impl ResourceEventHandler,
        resync: Duration,
    ) -> HandlerRegistration {
        self.subscribe(Arc::new(handler), Some(resync))
    }

    fn subscribe(&self, handler: Arc<dyn ResourceEventHandler>, resync: Option<Duration>) -> HandlerRegistration {
        let listener = Arc::new(Listener::default());
        self.inner.shared.subscribe(listener.clone());
        let delivery = tokio::spawn(listener.clone().run(handler)).abort_handle();
        let resync = resync.filter(|d| !d.is_zero()).map(|period| {
            let (shared, listener) = (self.inner.shared.clone(), listener.clone());
            tokio::spawn(async move {
                let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
                loop {
                    tick.tick().await;
                    shared.resync(&listener);
                }
            })
            .abort_handle()
        });
        HandlerRegistration { listener, tasks: [Some(delivery), resync], informer: self.clone() }
    }

    /// Number of live handles on this informer (the factory's reference count), for tests.
    pub fn handle_count(&self) -> usize {
        Arc::strong_count(&self.inner)
    }

    /// An informer with no watch behind it: its cache holds `objects` and it has synced. The
    /// host's cache for runs without a cluster (`kubewasm test`): reads, indexes and handlers
    /// behave as on a watched cache. Must be called within a tokio runtime.
    pub fn seeded(gvk: &GroupVersionKind, objects: impl IntoIterator<Item = CachedObject>) -> Result<Self> {
        let metrics = Arc::new(InformerMetrics::register(&prometheus::Registry::new())?);
        let shared = Arc::new(Shared::new(gvk.clone(), metrics));
        for object in objects {
            shared.apply(Arc::new(object), true);
        }
        shared.mark_synced();
        let key = InformerKey::new(gvk.clone(), super::InformerParams::default());
        let reflector = tokio::spawn(async {}).abort_handle();
        Ok(Self { inner: Arc::new(InformerInner { shared, key, reflector }) })
    }
}

/// A subscribed handler (client-go `ResourceEventHandlerRegistration`). Dropping it
/// unsubscribes the handler; it also keeps the informer alive.
pub struct HandlerRegistration {
    listener: Arc<Listener>,
    tasks: [Option<AbortHandle>; 2],
    informer: Informer,
}

impl HandlerRegistration {
    /// The informer this handler listens to.
    pub fn informer(&self) -> &Informer {
        &self.informer
    }

    /// Object keys with a notification not yet handed to the handler (bounded by the number
    /// of objects, however many events arrive).
    pub fn pending(&self) -> usize {
        self.listener.pending()
    }
}

impl Drop for HandlerRegistration {
    fn drop(&mut self) {
        self.informer.inner.shared.unsubscribe(&self.listener);
        for task in self.tasks.iter().flatten() {
            task.abort();
        }
    }
}

#[cfg(test)]
#[path = "shared_informer_tests.rs"]
mod tests;
