//! Helpers of the hot-load tests: the stamper fixture's config and a recorder of reconcile spans.
#![allow(dead_code)]

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use k8s_openapi::api::core::v1::ConfigMap;
use tracing::span::{Attributes, Id};
use tracing::{Subscriber, field};
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::layer::{Context, Layer};
use tracing_subscriber::prelude::*;
use tracing_subscriber::registry::LookupSpan;

/// The annotation the stamper writes.
pub const STAMP: &str = "kubewasm.test/version";

/// The stamper's operator config (it reads and patches ConfigMaps it does not own: read and write approvals).
pub fn stamper_config(version: &str, selector: &str, max_concurrent: u32) -> String {
    format!(
        "maxConcurrent: {max_concurrent}\ngrants:\n  read: [ConfigMap]\n  write: [ConfigMap]\nsettings:\n  version: {version}\n  selector: \"{selector}\"\n"
    )
}

/// The version stamped on a ConfigMap.
pub fn stamp_of(cm: &ConfigMap) -> Option<&str> {
    cm.metadata.annotations.as_ref()?.get(STAMP).map(String::as_str)
}

/// One finished reconcile.
#[derive(Clone, Debug)]
pub struct Run {
    /// `namespace/name`.
    pub key: String,
    /// Plugin revision that ran it.
    pub revision: u64,
    /// When its span was made (the worker had taken the key).
    pub start: Instant,
    /// When the worker last left its span: the reconcile and its settling are over.
    pub end: Instant,
}

/// Every reconcile span closed in this test binary.
///
/// A run ends when the worker task that made its span last leaves it, not at the span's close
/// nor at its last exit anywhere: a tower `Buffer` carries the caller's span into its own task
/// with each request and leaves it only after handing the response back, so on a loaded machine
/// the span of a finished reconcile was left, and closed, a millisecond after the same worker had
/// begun its next reconcile (seen with requests sent through a plugin's impersonating client,
/// which adds a `Buffer`; issue 33).
#[derive(Clone, Default)]
pub struct Spans(Arc<Mutex<Vec<Run>>>);

struct Open {
    key: String,
    revision: u64,
    start: Instant,
    /// The task that made the span: the worker running the reconcile.
    task: Option<tokio::task::Id>,
    last_exit: Option<Instant>,
}

#[derive(Default)]
struct Fields {
    key: String,
    revision: u64,
}

impl field::Visit for Fields {
    fn record_u64(&mut self, f: &field::Field, value: u64) {
        if f.name() == "revision" {
            self.revision = value;
        }
    }
    fn record_debug(&mut self, f: &field::Field, value: &dyn std::fmt::Debug) {
        if f.name() == "key" {
            self.key = format!("{value:?}");
        }
    }
}

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Spans {
    /// The reconcile span is at INFO. Without a hint the binary's level would be TRACE, and the
    /// `log` bridge would pass every `trace!` of Cranelift's to the subscriber: 9% of the `all`
    /// binary's CPU (perf, CONTRIBUTING.md "Build and test time").
    fn max_level_hint(&self) -> Option<LevelFilter> {
        Some(LevelFilter::INFO)
    }

    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        if attrs.metadata().name() != "reconcile" {
            return;
        }
        let mut fields = Fields::default();
        attrs.record(&mut fields);
        let open = Open {
            key: fields.key,
            revision: fields.revision,
            start: Instant::now(),
            task: tokio::task::try_id(),
            last_exit: None,
        };
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(open);
        }
    }

    fn on_exit(&self, id: &Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        if let Some(open) = span.extensions_mut().get_mut::<Open>().filter(|o| o.task == tokio::task::try_id()) {
            open.last_exit = Some(Instant::now());
        }
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(&id) else { return };
        if let Some(open) = span.extensions_mut().remove::<Open>() {
            let end = open.last_exit.unwrap_or_else(Instant::now);
            let run = Run { key: open.key, revision: open.revision, start: open.start, end };
            self.0.lock().unwrap().push(run);
        }
    }
}

impl Spans {
    /// Installs the recorder as this test binary's global subscriber (once), with a log printed
    /// to the test's output when `RUST_LOG` is set.
    pub fn install() -> Spans {
        static SPANS: OnceLock<Spans> = OnceLock::new();
        SPANS
            .get_or_init(|| {
                let spans = Spans::default();
                let log = std::env::var_os("RUST_LOG").map(|_| {
                    tracing_subscriber::fmt::layer()
                        .with_test_writer()
                        .with_filter(tracing_subscriber::EnvFilter::from_default_env())
                });
                tracing_subscriber::registry().with(spans.clone()).with(log).init();
                spans
            })
            .clone()
    }

    /// Every finished reconcile.
    pub fn all(&self) -> Vec<Run> {
        self.0.lock().unwrap().clone()
    }

    /// Finished reconciles of keys in `namespace`.
    pub fn of_namespace(&self, namespace: &str) -> Vec<Run> {
        let prefix = format!("{namespace}/");
        self.0.lock().unwrap().iter().filter(|r| r.key.starts_with(&prefix)).cloned().collect()
    }
}

/// Creates ConfigMaps `names` in `ns` labelled `label` (`key=value`), 16 at a time.
pub async fn create_config_maps(client: &kube::Client, ns: &str, label: &str, names: impl Iterator<Item = String>) {
    use futures::StreamExt as _;
    let api: kube::Api<ConfigMap> = kube::Api::namespaced(client.clone(), ns);
    let (key, value) = label.split_once('=').unwrap();
    futures::stream::iter(names)
        .map(|name| {
            let api = api.clone();
            let cm: ConfigMap = serde_json::from_value(serde_json::json!({
                "metadata": { "name": name, "labels": { key: value } },
                "data": { "k": "v" },
            }))
            .unwrap();
            async move { api.create(&kube::api::PostParams::default(), &cm).await.unwrap() }
        })
        .buffer_unordered(16)
        .collect::<Vec<_>>()
        .await;
}
