//! The reflector: keeps an informer's cache equal to the server's state by running
//! kube-runtime's `watcher` (list/watch, 410 → relist, bookmarks) with client-go's backoff.

use std::{collections::HashSet, fmt, sync::Arc};

use futures::StreamExt;
use kube::{
    api::{Api, ApiResource, DynamicObject},
    runtime::{
        WatchStreamExt,
        watcher::{self, Event},
    },
};

use super::{object::CachedObject, shared_informer::Shared};

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

/// Rewrites each object before it is cached (client-go `TransformFunc`).
pub type Transform = Arc<dyn Fn(&mut DynamicObject) + Send + Sync>;

/// How reflectors list and watch; set on the factory.
#[derive(Clone)]
pub struct ReflectorConfig {
    /// Initial list strategy; [`ListStrategy::Auto`] by default.
    pub list_strategy: ListStrategy,
    /// Page size of paginated lists; 500 as in client-go's pager.
    pub page_size: u32,
    /// Applied to each object before it is serialized into the cache; by default strips
    /// `metadata.managedFields`.
    pub transform: Transform,
}

impl Default for ReflectorConfig {
    fn default() -> Self {
        Self {
            list_strategy: ListStrategy::Auto,
            page_size: 500,
            transform: Arc::new(super::object::strip_managed_fields),
        }
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
    pub(crate) api: Api<DynamicObject>,
    pub(crate) resource: ApiResource,
    pub(crate) label_selector: Option<String>,
    pub(crate) field_selector: Option<String>,
    pub(crate) config: ReflectorConfig,
    /// Whether to start with a streaming list (decided by the factory from the server version).
    pub(crate) streaming: bool,
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
    pub(crate) async fn run(self, shared: Arc<Shared>) {
        let kind = shared.kind.clone();
        let metrics = shared.metrics.clone();
        let mut streaming = self.streaming;
        loop {
            let mut stream =
                watcher::watcher(self.api.clone(), self.watcher_config(streaming)).default_backoff().boxed();
            metrics.watch_starts.with_label_values(&[&kind]).inc();
            // Keys seen by the (re)list in progress; `Some` between Init and InitDone.
            let mut listing: Option<HashSet<Arc<str>>> = None;
            let mut fall_back = false;
            while let Some(event) = stream.next().await {
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
                        if let Some(obj) = self.convert(obj) {
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
                        tracing::debug!(%kind, objects = shared.store.len(), streaming, "list applied");
                    }
                    Ok(Event::Apply(obj)) => {
                        if let Some(obj) = self.convert(obj) {
                            shared.apply(obj, false);
                        }
                    }
                    Ok(Event::Delete(obj)) => {
                        if let Some(obj) = self.convert(obj) {
                            shared.remove(obj);
                        }
                    }
                    Err(err) => {
                        metrics.watch_errors.with_label_values(&[&kind, error_reason(&err)]).inc();
                        metrics.watch_starts.with_label_values(&[&kind]).inc();
                        tracing::debug!(%kind, error = %err, "watch error; the watcher retries with backoff");
                        shared.record_error(err.to_string());
                        let refused = streaming
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
                return; // the watcher's stream does not end on its own
            }
            streaming = false;
        }
    }

    fn convert(&self, mut obj: DynamicObject) -> Option<Arc<CachedObject>> {
        (self.config.transform)(&mut obj);
        match CachedObject::from_dynamic(obj, &self.resource) {
            Ok(o) => Some(Arc::new(o)),
            Err(err) => {
                tracing::warn!(kind = %self.resource.kind, error = %err, "skipping an object that cannot be cached");
                None
            }
        }
    }
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
