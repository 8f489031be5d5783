//! The write scheduler's metrics: seats, heavy plugins' pace, and how long requests waited.

use std::time::Duration;

use prometheus::{Gauge, HistogramOpts, HistogramVec, IntCounterVec, IntGauge, Opts, Registry};

/// Seat waits from 100 µs (a free seat) to 10 s (past the write timeout).
const WAIT_BUCKETS: &[f64] = &[0.0001, 0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];

/// What an operator reads to see the host throttling writes.
#[derive(Clone)]
pub struct FairMetrics {
    seats: IntGauge,
    in_use: IntGauge,
    paced_rate: Gauge,
    waited: HistogramVec,
    pushbacks: IntCounterVec,
}

impl FairMetrics {
    /// Creates and registers `kubewasm_write_seats`, `kubewasm_write_seats_in_use`,
    /// `kubewasm_write_paced_rate`, `kubewasm_plugin_write_seat_wait_seconds` and
    /// `kubewasm_plugin_write_pushbacks_total`.
    pub fn register(registry: &Registry) -> prometheus::Result<Self> {
        let seats = IntGauge::new(
            "kubewasm_write_seats",
            "Plugin requests the host lets be in flight at the API server at once (adapts to its latency and 429s)",
        )?;
        let in_use = IntGauge::new("kubewasm_write_seats_in_use", "Plugin requests in flight at the API server")?;
        let paced_rate = Gauge::new(
            "kubewasm_write_paced_rate",
            "Requests a second each plugin using far more of the API server than a neighbour writing beside it may start (0: none is paced)",
        )?;
        let waited = HistogramVec::new(
            HistogramOpts::new(
                "kubewasm_plugin_write_seat_wait_seconds",
                "Time a plugin's request waited for a seat before it was sent",
            )
            .buckets(WAIT_BUCKETS.to_vec()),
            &["plugin"],
        )?;
        let pushbacks = IntCounterVec::new(
            Opts::new(
                "kubewasm_plugin_write_pushbacks_total",
                "Plugin requests the API server answered 429 Too Many Requests; the plugin waited its Retry-After",
            ),
            &["plugin"],
        )?;
        registry.register(Box::new(seats.clone()))?;
        registry.register(Box::new(in_use.clone()))?;
        registry.register(Box::new(paced_rate.clone()))?;
        registry.register(Box::new(waited.clone()))?;
        registry.register(Box::new(pushbacks.clone()))?;
        Ok(Self { seats, in_use, paced_rate, waited, pushbacks })
    }

    pub(super) fn seats(&self, seats: usize, in_use: usize) {
        self.seats.set(i64::try_from(seats).unwrap_or(i64::MAX));
        self.in_use.set(i64::try_from(in_use).unwrap_or(i64::MAX));
    }

    pub(super) fn paced_rate(&self, rate: Option<f64>) {
        self.paced_rate.set(rate.unwrap_or(0.0));
    }

    pub(super) fn waited(&self, plugin: &str, waited: Duration) {
        self.waited.with_label_values(&[plugin]).observe(waited.as_secs_f64());
    }

    pub(super) fn pushed_back(&self, plugin: &str) {
        self.pushbacks.with_label_values(&[plugin]).inc();
    }
}
