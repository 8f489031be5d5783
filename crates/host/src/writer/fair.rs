//! Fair queuing of plugins' requests to the API server: a host-wide budget of seats (requests in
//! flight), handed round the plugins that have requests waiting, and sized by the API server's
//! own answers (its latency, its 429s) rather than by a guessed rate.
//!
//! A plugin alone gets every seat, so the host never slows it; plugins with requests waiting get
//! one seat each in turn, so each busy plugin gets an equal share and a plugin with one request
//! waits for at most one seat to come free, however many its neighbour queued. This is the API
//! server's priority-and-fairness (fair queuing of flows, seats of concurrency) done on the
//! client side, where every plugin's writes still leave through one host.
//!
//! The seat count follows the API server, AIMD as in TCP and Netflix's concurrency-limits: it
//! grows by one a round of answers while the smoothed latency stays within
//! [`Config::tolerance`] times the least seen lately (the API server is not queueing), shrinks by
//! a tenth a round while latency rises past it, and halves on a 429, which also pauses the plugin
//! that got it for the answer's Retry-After while the other plugins go on (with per-plugin
//! identities the API server rejects one plugin's flow, not the host). The writer sends such a
//! request again once the pause is over, in a new seat.
//!
//! Hand-written: tower's `ConcurrencyLimit` has a fixed size and one first-come queue, and the
//! adaptive-limit crates (ports of concurrency-limits) size a limit but also serve callers first
//! come; none hands seats round the callers' flows.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::oneshot;
use tokio::time::Instant;

pub use self::metrics::FairMetrics;
use self::pacing::Pacing;

pub mod metrics;
mod pacing;

/// Most seats (writes in flight) the host's plugins share, and the count it starts at. 32: twice
/// the most workers one plugin may have (`--max-concurrent-cap` 16, each with one write in
/// flight at a time), so a plugin alone never waits for a seat, and far below kube-apiserver's
/// `--max-mutating-requests-inflight` (200) so the host alone cannot fill it.
pub const DEFAULT_MAX_SEATS: usize = 32;

/// Fewest seats, however hard the API server pushes back: 2, so two requests are always in
/// flight side by side and one slow answer never holds every other plugin's write.
pub const DEFAULT_MIN_SEATS: usize = 2;

/// How far the smoothed latency may rise above the least seen lately before the seats shrink:
/// 2×, TCP Vegas' and concurrency-limits' reading of "a queue is building at the server".
pub const DEFAULT_TOLERANCE: f64 = 2.0;

/// Weight of one answer in the smoothed latency (an exponential moving average over about the
/// last ten answers).
const SMOOTHING: f64 = 0.1;

/// How fast the remembered least latency rises with age (1% a second), so that a slower API
/// server, or another mix of requests, becomes the new normal within a minute or two.
const BASELINE_DRIFT_PER_SEC: f64 = 0.01;

/// The scheduler's settings: `Config::default().max_seats(16)`.
#[derive(Clone, Debug)]
pub struct Config {
    max_seats: usize,
    min_seats: usize,
    tolerance: f64,
}

impl Default for Config {
    /// [`DEFAULT_MAX_SEATS`], [`DEFAULT_MIN_SEATS`], [`DEFAULT_TOLERANCE`].
    fn default() -> Self {
        Self { max_seats: DEFAULT_MAX_SEATS, min_seats: DEFAULT_MIN_SEATS, tolerance: DEFAULT_TOLERANCE }
    }
}

impl Config {
    /// Most seats, and the count the scheduler starts at (at least 1).
    #[must_use]
    pub fn max_seats(mut self, seats: usize) -> Self {
        self.max_seats = seats.max(1);
        self.min_seats = self.min_seats.min(self.max_seats);
        self
    }

    /// Fewest seats (at least 1, at most the most).
    #[must_use]
    pub fn min_seats(mut self, seats: usize) -> Self {
        self.min_seats = seats.clamp(1, self.max_seats);
        self
    }

    /// How many times the least recent latency the smoothed latency may reach before the seats
    /// shrink (above 1).
    #[must_use]
    pub fn tolerance(mut self, tolerance: f64) -> Self {
        self.tolerance = tolerance.max(1.0);
        self
    }
}

/// How a request that held a seat was answered: what the scheduler learns from it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    /// The API server answered (success or a request's own error): its latency counts.
    Answered,
    /// 429 Too Many Requests: the plugin waits this long (the answer's Retry-After) before its
    /// next request, and the seats halve.
    TooManyRequests(Duration),
    /// No answer (transport failure, timeout): nothing learnt.
    Failed,
}

/// The host's write scheduler; cheap to clone, clones share the seats.
#[derive(Clone)]
pub struct Scheduler(Arc<Inner>);

struct Inner {
    config: Config,
    state: Mutex<State>,
    metrics: OnceLock<FairMetrics>,
}

struct State {
    /// The current budget; fractional so additive increase can add 1/seats an answer.
    seats: f64,
    in_flight: usize,
    /// Plugins with requests waiting or a pause running.
    flows: HashMap<Arc<str>, Flow>,
    /// Plugins with requests waiting, in the order they are served.
    ring: VecDeque<Arc<str>>,
    /// Smoothed latency of answered requests, seconds.
    smoothed: Option<f64>,
    /// Least smoothed latency, seconds, and when it was seen.
    baseline: Option<(f64, Instant)>,
    last_decrease: Option<Instant>,
    /// Heavy plugins held to a rate while a light neighbour writes.
    pacing: Pacing,
    /// When a paced plugin's wake-up is set for, if one is.
    wake_at: Option<Instant>,
}

#[derive(Default)]
struct Flow {
    waiting: VecDeque<oneshot::Sender<Seat>>,
    paused_until: Option<Instant>,
}

impl Default for Scheduler {
    fn default() -> Self {
        Self::new(Config::default())
    }
}

impl Scheduler {
    /// A scheduler starting at `config`'s most seats.
    pub fn new(config: Config) -> Self {
        let state = State {
            seats: config.max_seats as f64,
            in_flight: 0,
            flows: HashMap::new(),
            ring: VecDeque::new(),
            smoothed: None,
            baseline: None,
            last_decrease: None,
            pacing: Pacing::default(),
            wake_at: None,
        };
        Self(Arc::new(Inner { config, state: Mutex::new(state), metrics: OnceLock::new() }))
    }

    /// Reports seats, waits and pushbacks to `metrics` (the first metrics set stay).
    #[must_use]
    pub fn metrics(self, metrics: FairMetrics) -> Self {
        let _ = self.0.metrics.set(metrics);
        self.report(&self.0.state.lock());
        self
    }

    /// The seats there are now.
    pub fn seats(&self) -> usize {
        self.0.state.lock().budget(&self.0.config)
    }

    /// Seats held now.
    pub fn in_flight(&self) -> usize {
        self.0.state.lock().in_flight
    }

    /// Waits for a seat for one of `plugin`'s requests; hold it until the answer, then hand it
    /// back with [`Seat::done`]. Cancel-safe: a caller that stops waiting takes no seat.
    pub async fn seat(&self, plugin: &str) -> Seat {
        let asked = Instant::now();
        let (tx, rx) = oneshot::channel();
        {
            let mut state = self.0.state.lock();
            let state = &mut *state;
            let plugin: Arc<str> = plugin.into();
            state.pacing.asked(&plugin, asked);
            let flow = state.flows.entry(plugin.clone()).or_default();
            flow.waiting.push_back(tx);
            if flow.waiting.len() == 1 {
                state.ring.push_back(plugin);
            }
            self.dispatch(state);
        }
        let mut seat = rx.await.expect("a waiter's sender is only dropped with a seat sent");
        seat.granted = Instant::now();
        if let Some(metrics) = self.0.metrics.get() {
            metrics.waited(plugin, seat.granted - asked);
        }
        seat
    }

    /// Hands free seats to waiting plugins, one each in turn, skipping paused ones and heavy
    /// ones whose pace does not allow a request yet.
    fn dispatch(&self, state: &mut State) {
        let budget = state.budget(&self.0.config);
        let now = Instant::now();
        let mut skipped = 0;
        while state.in_flight < budget && skipped < state.ring.len() {
            let Some(plugin) = state.ring.pop_front() else { break };
            let flow = state.flows.get_mut(&plugin).expect("a plugin in the ring has a flow");
            if flow.paused_until.is_some_and(|until| until > now) {
                state.ring.push_back(plugin);
                skipped += 1;
                continue;
            }
            flow.paused_until = None;
            if let Err(at) = state.pacing.may_start(&plugin, now) {
                state.ring.push_back(plugin);
                skipped += 1;
                self.wake(state, at);
                continue;
            }
            let flow = state.flows.get_mut(&plugin).expect("a plugin in the ring has a flow");
            while let Some(tx) = flow.waiting.pop_front() {
                let seat = Seat { scheduler: Some(self.clone()), plugin: plugin.clone(), granted: now };
                match tx.send(seat) {
                    Ok(()) => {
                        state.in_flight += 1;
                        skipped = 0;
                        break;
                    }
                    // The caller stopped waiting: the seat goes to the next waiter.
                    Err(mut seat) => {
                        seat.scheduler = None;
                        state.pacing.left(&plugin, now);
                    }
                }
            }
            if flow.waiting.is_empty() {
                state.flows.remove(&plugin);
            } else {
                state.ring.push_back(plugin);
            }
        }
        self.report(state);
    }

    /// Serves whoever waits again at `at`, when a paced plugin may start (one wake-up at a time,
    /// the earliest).
    fn wake(&self, state: &mut State, at: Instant) {
        if state.wake_at.is_some_and(|set| set <= at) {
            return;
        }
        state.wake_at = Some(at);
        let scheduler = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep_until(at).await;
            let mut state = scheduler.0.state.lock();
            if state.wake_at == Some(at) {
                state.wake_at = None;
            }
            scheduler.dispatch(&mut state);
        });
    }

    fn release(&self, plugin: &str, answer: Option<(Answer, Duration)>) {
        let mut state = self.0.state.lock();
        state.in_flight -= 1;
        let now = Instant::now();
        let (held, answered) = match answer {
            Some((answer, held)) => (held, answer == Answer::Answered),
            None => (Duration::ZERO, false),
        };
        state.pacing.done(plugin, held, answered, now);
        state.pacing.settle(now);
        match answer {
            Some((Answer::Answered, latency)) => state.learn(&self.0.config, latency, now),
            Some((Answer::TooManyRequests(retry_after), _)) => {
                state.decrease(&self.0.config, 0.5, now);
                let until = now + retry_after;
                let flow = state.flows.entry(plugin.into()).or_default();
                flow.paused_until = Some(flow.paused_until.map_or(until, |u| u.max(until)));
                if let Some(metrics) = self.0.metrics.get() {
                    metrics.pushed_back(plugin);
                }
                let scheduler = self.clone();
                let plugin: Arc<str> = plugin.into();
                tokio::spawn(async move {
                    tokio::time::sleep_until(until).await;
                    scheduler.resume(&plugin);
                });
            }
            Some((Answer::Failed, _)) | None => {}
        }
        self.dispatch(&mut state);
    }

    /// Ends `plugin`'s pause if it is over, and serves whoever waits.
    fn resume(&self, plugin: &str) {
        let mut state = self.0.state.lock();
        if let Some(flow) = state.flows.get_mut(plugin)
            && flow.paused_until.is_some_and(|until| until <= Instant::now())
        {
            flow.paused_until = None;
            if flow.waiting.is_empty() {
                state.flows.remove(plugin);
            }
        }
        self.dispatch(&mut state);
    }

    fn report(&self, state: &State) {
        if let Some(metrics) = self.0.metrics.get() {
            metrics.seats(state.budget(&self.0.config), state.in_flight);
            metrics.paced_rate(state.pacing.rate());
        }
    }
}

impl State {
    fn budget(&self, config: &Config) -> usize {
        (self.seats.floor() as usize).clamp(config.min_seats, config.max_seats)
    }

    /// Takes one answer's latency: more seats while it stays near the least seen lately, fewer
    /// (at most once a round trip) while it rises past it.
    fn learn(&mut self, config: &Config, latency: Duration, now: Instant) {
        let sample = latency.as_secs_f64();
        let smoothed = self.smoothed.map_or(sample, |s| s + SMOOTHING * (sample - s));
        self.smoothed = Some(smoothed);
        let baseline = match self.baseline {
            Some((least, at)) => least * (1.0 + BASELINE_DRIFT_PER_SEC).powf((now - at).as_secs_f64()),
            None => f64::INFINITY,
        };
        if smoothed <= baseline {
            self.baseline = Some((smoothed, now));
        }
        let baseline = baseline.min(smoothed);
        if smoothed > config.tolerance * baseline {
            let round = Duration::from_secs_f64(smoothed);
            if self.last_decrease.is_none_or(|at| now - at >= round) {
                self.decrease(config, 0.9, now);
            }
        } else {
            self.seats = (self.seats + 1.0 / self.seats.max(1.0)).min(config.max_seats as f64);
        }
    }

    fn decrease(&mut self, config: &Config, factor: f64, now: Instant) {
        self.seats = (self.seats * factor).max(config.min_seats as f64);
        self.last_decrease = Some(now);
    }
}

/// One request's seat; handed back with [`Seat::done`] (or when dropped, learning nothing).
pub struct Seat {
    scheduler: Option<Scheduler>,
    plugin: Arc<str>,
    granted: Instant,
}

impl Seat {
    /// Hands the seat back with what the API server answered.
    pub fn done(mut self, answer: Answer) {
        if let Some(scheduler) = self.scheduler.take() {
            scheduler.release(&self.plugin, Some((answer, self.granted.elapsed())));
        }
    }
}

impl Drop for Seat {
    fn drop(&mut self) {
        if let Some(scheduler) = self.scheduler.take() {
            scheduler.release(&self.plugin, None);
        }
    }
}

#[cfg(test)]
#[path = "fair_tests.rs"]
mod tests;
