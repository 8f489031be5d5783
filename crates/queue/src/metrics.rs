//! Prometheus metrics of work queues, under the names and `name` label of client-go and
//! controller-runtime, so existing workqueue dashboards and alerts apply unchanged.
//!
//! `workqueue_unfinished_work_seconds` and `workqueue_longest_running_processor_seconds` are
//! computed when the registry is gathered (client-go refreshes them every 500 ms instead): the
//! values are exact at scrape time and no background task is needed. A gather locks each live
//! queue once and walks its keys.

use std::sync::{Arc, Weak};

use parking_lot::Mutex;
use prometheus::{
    Gauge, GaugeVec, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry,
    core::{Collector, Desc},
    proto::MetricFamily,
};
use tokio::time::Instant;

use super::{Error, Result};

/// The label every workqueue metric carries: the queue's name.
const LABEL: &str = "name";

/// Workqueue metrics registered on one registry; each named queue reports under its own label.
///
/// Cheap to clone. Build once with [`QueueMetrics::register`] and pass to each queue's
/// [`Config::metrics`](super::Config::metrics).
#[derive(Clone)]
pub struct QueueMetrics {
    depth: IntGaugeVec,
    adds: IntCounterVec,
    queue_duration: HistogramVec,
    work_duration: HistogramVec,
    retries: IntCounterVec,
    in_flight: InFlightCollector,
}

impl std::fmt::Debug for QueueMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueueMetrics").finish_non_exhaustive()
    }
}

impl QueueMetrics {
    /// Creates the workqueue metrics and registers them on `registry`.
    ///
    /// Fails if the registry already holds metrics of these names.
    pub fn register(registry: &Registry) -> Result<Self> {
        // Bucket bounds 10 ns … 1000 s, as controller-runtime's pkg/metrics/workqueue.go.
        let buckets = prometheus::exponential_buckets(10e-9, 10.0, 12).map_err(Error::Metrics)?;
        let histogram = |name: &str, help: &str| {
            HistogramVec::new(HistogramOpts::new(name, help).buckets(buckets.clone()), &[LABEL])
        };
        let metrics = Self {
            depth: IntGaugeVec::new(Opts::new("workqueue_depth", "Keys waiting in the work queue."), &[LABEL])
                .map_err(Error::Metrics)?,
            adds: IntCounterVec::new(Opts::new("workqueue_adds_total", "Keys added to the work queue."), &[LABEL])
                .map_err(Error::Metrics)?,
            queue_duration: histogram(
                "workqueue_queue_duration_seconds",
                "Seconds a key waited in the work queue before a worker took it.",
            )
            .map_err(Error::Metrics)?,
            work_duration: histogram(
                "workqueue_work_duration_seconds",
                "Seconds a worker spent on a key, from get to done.",
            )
            .map_err(Error::Metrics)?,
            retries: IntCounterVec::new(
                Opts::new("workqueue_retries_total", "Delayed or rate-limited adds to the work queue."),
                &[LABEL],
            )
            .map_err(Error::Metrics)?,
            in_flight: InFlightCollector::new().map_err(Error::Metrics)?,
        };
        let collectors: [Box<dyn Collector>; 6] = [
            Box::new(metrics.depth.clone()),
            Box::new(metrics.adds.clone()),
            Box::new(metrics.queue_duration.clone()),
            Box::new(metrics.work_duration.clone()),
            Box::new(metrics.retries.clone()),
            Box::new(metrics.in_flight.clone()),
        ];
        for collector in collectors {
            registry.register(collector).map_err(Error::Metrics)?;
        }
        Ok(metrics)
    }

    /// The handles of one queue, and its registration for the in-flight gauges.
    pub(super) fn queue(&self, name: &str, source: Weak<dyn InFlight>) -> Handle {
        self.in_flight.queues.lock().push((name.to_owned(), source));
        Handle {
            depth: self.depth.with_label_values(&[name]),
            adds: self.adds.with_label_values(&[name]),
            queue_duration: self.queue_duration.with_label_values(&[name]),
            work_duration: self.work_duration.with_label_values(&[name]),
            retries: self.retries.with_label_values(&[name]),
        }
    }
}

/// One queue's metrics, resolved for its `name` label once.
pub(super) struct Handle {
    depth: IntGauge,
    adds: IntCounter,
    queue_duration: Histogram,
    work_duration: Histogram,
    retries: IntCounter,
}

impl Handle {
    /// A key entered the queue (or was marked dirty while processing).
    pub(super) fn add(&self) {
        self.adds.inc();
        self.depth.inc();
    }

    /// A worker took a key that was added at `added`.
    pub(super) fn get(&self, added: Option<Instant>, now: Instant) {
        self.depth.dec();
        if let Some(added) = added {
            self.queue_duration.observe(now.saturating_duration_since(added).as_secs_f64());
        }
    }

    /// A worker finished a key it took at `started`.
    pub(super) fn done(&self, started: Option<Instant>, now: Instant) {
        if let Some(started) = started {
            self.work_duration.observe(now.saturating_duration_since(started).as_secs_f64());
        }
    }

    /// `n` keys that were queued (or marked to come back) were dropped by a shutdown.
    pub(super) fn discarded(&self, n: usize) {
        self.depth.sub(i64::try_from(n).unwrap_or(i64::MAX));
    }

    /// A delayed or rate-limited add.
    pub(super) fn retry(&self) {
        self.retries.inc();
    }
}

/// A queue that can say, at `now`, how long its in-flight keys have been processing.
pub(super) trait InFlight: Send + Sync {
    /// Total seconds of all in-flight keys, and the longest single one.
    fn in_flight(&self, now: Instant) -> (f64, f64);
}

/// Computes the two in-flight gauges of every live queue when the registry is gathered.
#[derive(Clone)]
struct InFlightCollector {
    unfinished: GaugeVec,
    longest: GaugeVec,
    queues: Arc<Mutex<Vec<Source>>>,
}

/// A queue's name and the queue itself, held weakly so metrics never keep a queue alive.
type Source = (String, Weak<dyn InFlight>);

impl InFlightCollector {
    fn new() -> prometheus::Result<Self> {
        Ok(Self {
            unfinished: GaugeVec::new(
                Opts::new(
                    "workqueue_unfinished_work_seconds",
                    "Seconds of work in progress not yet observed by work_duration; \
                     a steady climb means stuck workers.",
                ),
                &[LABEL],
            )?,
            longest: GaugeVec::new(
                Opts::new(
                    "workqueue_longest_running_processor_seconds",
                    "Seconds the longest-running in-flight key has been processing.",
                ),
                &[LABEL],
            )?,
            queues: Arc::default(),
        })
    }

    fn refresh(&self) {
        let now = Instant::now();
        let mut totals: Vec<(String, f64, f64)> = Vec::new();
        let mut dead: Vec<String> = Vec::new();
        let mut queues = self.queues.lock();
        queues.retain(|(name, source)| {
            let Some(queue) = source.upgrade() else {
                dead.push(name.clone());
                return false;
            };
            let (unfinished, longest) = queue.in_flight(now);
            match totals.iter_mut().find(|(n, ..)| n == name) {
                Some((_, u, l)) => {
                    *u += unfinished;
                    *l = l.max(longest);
                }
                None => totals.push((name.clone(), unfinished, longest)),
            }
            true
        });
        drop(queues);
        // A dropped queue's gauges go away unless a live queue shares its name.
        for name in &dead {
            if !totals.iter().any(|(n, ..)| n == name) {
                let _ = self.unfinished.remove_label_values(&[name]);
                let _ = self.longest.remove_label_values(&[name]);
            }
        }
        for (name, unfinished, longest) in &totals {
            gauge(&self.unfinished, name).set(*unfinished);
            gauge(&self.longest, name).set(*longest);
        }
    }
}

fn gauge(vec: &GaugeVec, name: &str) -> Gauge {
    vec.with_label_values(&[name])
}

impl Collector for InFlightCollector {
    fn desc(&self) -> Vec<&Desc> {
        let mut descs = self.unfinished.desc();
        descs.extend(self.longest.desc());
        descs
    }

    fn collect(&self) -> Vec<MetricFamily> {
        self.refresh();
        let mut families = self.unfinished.collect();
        families.extend(self.longest.collect());
        families
    }
}
