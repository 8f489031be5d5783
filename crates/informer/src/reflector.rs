//! The reflector: keeps an informer's cache equal to the server's state by running
//! kube-runtime's `watcher` (list/watch, 410 → relist, bookmarks) with client-go's backoff.

use std::{collections::HashSet, fmt, sync::Arc};

use futures::StreamExt;
use kube::{
    api::{Api, ApiResource},
    runtime::{
        WatchStreamExt,
        watcher::{self, Event},
    },
};

use prometheus::IntGauge;
use tokio::sync::watch;

use super::shard::{HashRange, ListedRange, fnv1a64, selector};
use super::{object::CachedObject, raw::RawObject, shared_informer::Shared};

/// How the initial list is fetched.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ListStrategy {
    /// A streaming list (watch with `sendInitialEvents`) when the server is new enough
    /// (v1.32+, where the WatchList gate is on by default), falling back to a paginated list
    /// when the server refuses it.
    #[default]
    Auto,
    /// Always a streaming list.
    Streaming,
    /// Always a paginated list (500 per page, client-go's default).
    Paginated,
}

/// How reflectors list and watch; set on the factory.
#[derive(Clone)]
pub struct ReflectorConfig {
    /// Initial list strategy; [`ListStrategy::Auto`] by default.
    pub list_strategy: ListStrategy,
    /// Page size of paginated lists; 500 as in client-go's pager.
    pub page_size: u32,
    /// Whether cached objects keep `metadata.managedFields`; off by default: it is often most
    /// of an object's size and no controller reads it (client-go users strip it with a
    /// transform by hand).
    pub keep_managed_fields: bool,
    /// The field managers (a name prefix) whose `managedFields` entries each cached object keeps
    /// beside its JSON ([`CachedObject::managed_fields`]), whatever `keep_managed_fields` says:
    /// the host keeps its plugins' own entries to tell whether an apply would change anything.
    pub keep_managers: Option<Arc<str>>,
}

impl Default for ReflectorConfig {
    fn default() -> Self {
        Self { list_strategy: ListStrategy::Auto, page_size: 500, keep_managed_fields: false, keep_managers: None }
    }
}

impl fmt::Debug for ReflectorConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReflectorConfig")
            .field("list_strategy", &self.list_strategy)
            .field("page_size", &self.page_size)
            .finish_non_exhaustive()
    }
}

/// One reflector: what to watch and how.
pub(crate) struct Reflector {
    pub(crate) api: Api<RawObject>,
    pub(crate) resource: ApiResource,
    pub(crate) label_selector: Option<String>,
    pub(crate) field_selector: Option<String>,
    pub(crate) config: ReflectorConfig,
    /// Whether to start with a streaming list (decided by the factory from the server version).
    pub(crate) streaming: bool,
    /// Set when this informer lists and watches one hash range of the namespaces.
    pub(crate) shard: Option<ReflectorShard>,
}

/// What a sharded reflector follows and reports.
pub(crate) struct ReflectorShard {
    /// The range to list and watch; the reflector relists when it changes.
    pub(crate) caching: watch::Receiver<Option<HashRange>>,
    /// Where it reports each range it has listed completely.
    pub(crate) listed: ListedRange,
    /// 1 while the server ignores the selector and the reflector filters itself.
    pub(crate) client_side_filter: Option<IntGauge>,
    /// The informer's namespace, if it watches one.
    pub(crate) namespace: Option<String>,
}

impl Reflector {
    fn watcher_config(&self, streaming: bool) -> watcher::Config {
        let mut wc = watcher::Config::default().page_size(self.config.page_size);
        if let Some(l) = &self.label_selector {
            wc = wc.labels(l);
        }
        if let Some(f) = &self.field_selector {
            wc = wc.fields(f);
        }
        if streaming { wc.streaming_lists() } else { wc }
    }

    /// Runs until aborted: applies every watcher event to `shared`.
    pub(crate) async fn run(mut self, shared: Arc<Shared>) {
        // Whether to start with a streaming list; cleared for good once the server refused one.
        let mut streaming = self.streaming;
        let Some(mut shard) = self.shard.take() else {
            self.watch(self.api.clone(), None, &shared, std::future::pending::<()>(), &mut streaming).await;
            return;
        };
        let mut warned = false;
        loop {
            let Some(range) = *shard.caching.borrow_and_update() else {
                if shard.caching.changed().await.is_err() {
                    return;
                }
                continue;
            };
            let client = self.api.clone().into_client();
            let honoured = selector::server_honours(&client, self.api.resource_url(), &range).await;
            let honoured = honoured.unwrap_or_else(|e| {
                tracing::debug!(kind = %shared.kind, error = %e, "shard selector probe failed; filtering on the client");
                false
            });
            if let Some(gauge) = &shard.client_side_filter {
                gauge.set(i64::from(!honoured));
            }
            if !honoured && !warned {
                warned = true;
                tracing::warn!(kind = %shared.kind, "the API server ignores shardSelector (feature gate ShardedListAndWatch off?): listing everything and filtering on the client");
            }
            let api = match (&shard.namespace, honoured) {
                (_, false) => self.api.clone(),
                (Some(ns), true) => Api::namespaced_with(selector::sharded_client(client, &range), ns, &self.resource),
                (None, true) => Api::all_with(selector::sharded_client(client, &range), &self.resource),
            };
            let changed = shard.caching.changed();
            let filter = Filter { range, listed: &shard.listed };
            if !self.watch(api, Some(filter), &shared, changed, &mut streaming).await {
                return;
            }
        }
    }

    /// Runs one watcher on `api` until `stop` resolves (then `true`) or forever; with a
    /// `filter`, objects outside its range are not cached and completed lists are reported.
    async fn watch(
        &self,
        api: Api<RawObject>,
        filter: Option<Filter<'_>>,
        shared: &Arc<Shared>,
        stop: impl std::future::Future,
        streaming: &mut bool,
    ) -> bool {
        let kind = shared.kind.clone();
        let metrics = shared.metrics.clone();
        let mut stop = std::pin::pin!(stop);
        loop {
            let mut stream = watcher::watcher(api.clone(), self.watcher_config(*streaming)).default_backoff().boxed();
            metrics.watch_starts.with_label_values(&[&kind]).inc();
            // Keys seen by the (re)list in progress; `Some` between Init and InitDone.
            let mut listing: Option<HashSet<Arc<str>>> = None;
            let mut fall_back = false;
            loop {
                let event = tokio::select! {
                    _ = &mut stop => return true,
                    event = stream.next() => match event { Some(event) => event, None => break },
                };
                metrics.event_seen(&kind);
                match event {
                    Ok(Event::Init) => {
                        metrics.lists.with_label_values(&[&kind]).inc();
                        if shared.has_synced() {
                            metrics.relists.with_label_values(&[&kind]).inc();
                        }
                        listing = Some(HashSet::new());
                    }
                    Ok(Event::InitApply(obj)) => {
                        if let Some(obj) = self.convert(obj, filter.as_ref()) {
                            if let Some(seen) = listing.as_mut() {
                                seen.insert(obj.key_arc().clone());
                            }
                            shared.apply(obj, true);
                        }
                    }
                    Ok(Event::InitDone) => {
                        if let Some(seen) = listing.take() {
                            shared.replace_done(&seen);
                        }
                        shared.mark_synced();
                        if let Some(filter) = &filter {
                            filter.listed.listed(filter.range);
                        }
                        tracing::debug!(%kind, objects = shared.store.len(), streaming = *streaming, "list applied");
                    }
                    Ok(Event::Apply(obj)) => {
                        if let Some(obj) = self.convert(obj, filter.as_ref()) {
                            shared.apply(obj, false);
                        }
                    }
                    Ok(Event::Delete(obj)) => {
                        if let Some(obj) = self.convert(obj, filter.as_ref()) {
                            shared.remove(obj);
                        }
                    }
                    Err(err) => {
                        metrics.watch_errors.with_label_values(&[&kind, error_reason(&err)]).inc();
                        metrics.watch_starts.with_label_values(&[&kind]).inc();
                        tracing::debug!(%kind, error = %err, "watch error; the watcher retries with backoff");
                        shared.record_error(err.to_string());
                        let refused = *streaming
                            && !shared.has_synced()
                            && self.config.list_strategy == ListStrategy::Auto
                            && streaming_refused(&err);
                        if refused {
                            tracing::info!(%kind, error = %err, "server refused a streaming list; using paginated lists");
                            fall_back = true;
                            break;
                        }
                    }
                }
            }
            if !fall_back {
                return false; // the watcher's stream does not end on its own
            }
            *streaming = false;
        }
    }

    fn convert(&self, obj: RawObject, filter: Option<&Filter<'_>>) -> Option<Arc<CachedObject>> {
        // The same test the server applies: identical caches whether or not it honoured the
        // selector (and a no-op when it did).
        if filter.is_some_and(|f| !f.range.contains(fnv1a64(obj.metadata.namespace.as_deref().unwrap_or_default()))) {
            return None;
        }
        let managers = self.config.keep_managers.as_deref().and_then(|prefix| obj.managed_fields_of(prefix));
        match CachedObject::from_raw(obj, &self.resource, self.config.keep_managed_fields) {
            Ok(o) => Some(Arc::new(o.with_managed_fields(managers))),
            Err(err) => {
                tracing::warn!(kind = %self.resource.kind, error = %err, "skipping an object that cannot be cached");
                None
            }
        }
    }
}

/// A sharded reflector's range, applied on the client too.
struct Filter<'a> {
    range: HashRange,
    listed: &'a ListedRange,
}

/// Whether a watcher error means the server does not serve streaming lists (a 4xx other than
/// auth, throttling and 410 on the initial watch), as opposed to a transient failure.
fn streaming_refused(err: &watcher::Error) -> bool {
    let code = match err {
        watcher::Error::WatchStartFailed(kube::Error::Api(status)) => status.code,
        watcher::Error::WatchError(status) => status.code,
        _ => return false,
    };
    (400..500).contains(&code) && !matches!(code, 401 | 403 | 404 | 410 | 429)
}

/// Bounded `reason` label of `kubewasm_informer_watch_errors_total`.
fn error_reason(err: &watcher::Error) -> &'static str {
    match err {
        watcher::Error::InitialListFailed(_) => "list_failed",
        watcher::Error::WatchStartFailed(_) => "watch_start_failed",
        watcher::Error::WatchError(s) if s.code == 410 => "gone",
        watcher::Error::WatchError(_) => "watch_error_event",
        watcher::Error::WatchFailed(_) => "watch_failed",
        watcher::Error::NoResourceVersion => "no_resource_version",
    }
}

#[cfg(test)]
#[path = "reflector_tests.rs"]
mod tests;
