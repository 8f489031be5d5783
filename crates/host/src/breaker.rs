//! A circuit breaker on the API server: while the host's own client cannot reach it, workers
//! pause instead of failing every queued key and burning its backoff; a probe resumes them.
//!
//! client-go has no such thing: each key fails, charges the shared bucket and its own
//! exponential backoff, and keys that failed often during an outage wait minutes after it. Here
//! an `unavailable` answer to a plugin's write (transport failure, 429, 5xx, or no answer within
//! the write timeout, as from a hung API server) *trips* the breaker:
//! workers stop taking keys and a single task probes `GET /readyz` through the host's client.
//! If the first probe answers, the failure was the request's own (say a webhook's 500) and keys
//! keep their backoff as usual; if it does not, the breaker *opens* (one log line, the metric):
//! keys that failed meanwhile are re-added without charging their backoff, and the probe repeats
//! until the API server answers, which *closes* it (one log line). A SIGTERMed apiserver that
//! keeps its watches open while refusing writes and failing `/readyz` opens it the same way.
//!
//! Hand-written: the circuit-breaker crates (`failsafe`, `recloser`) decide from failure ratios
//! and reopen on a timer; this one is confirmed and closed by a probe and awaited by workers,
//! a few lines over [`tokio::sync::watch`].

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use futures::future::BoxFuture;
use prometheus::{IntCounter, IntGauge, Registry};
use tokio::sync::watch;

use crate::plugin::api::{ApiCall, ApiReply, ApiWriter, CallError, Caller};

/// The breaker's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// The API server answers: workers run.
    Closed,
    /// A write was unavailable; the first probe is out. Workers wait for its answer.
    Probing,
    /// The API server does not answer probes: workers wait; probes repeat.
    Open,
}

/// How to answer "does the API server answer?": `Ok` if it does, else why not.
pub type Probe = Arc<dyn Fn() -> BoxFuture<'static, Result<(), String>> + Send + Sync>;

/// The breaker's metrics, one pair per host (all plugins share one API server).
#[derive(Clone)]
pub struct BreakerMetrics {
    open: IntGauge,
    opened: IntCounter,
}

impl BreakerMetrics {
    /// Creates and registers `kubewasm_apiserver_breaker_open` and
    /// `kubewasm_apiserver_breaker_opened_total`.
    pub fn register(registry: &Registry) -> prometheus::Result<Self> {
        let open = IntGauge::new(
            "kubewasm_apiserver_breaker_open",
            "1 while the API server does not answer and workers pause, else 0",
        )?;
        let opened = IntCounter::new(
            "kubewasm_apiserver_breaker_opened_total",
            "Times the API server stopped answering and workers paused",
        )?;
        registry.register(Box::new(open.clone()))?;
        registry.register(Box::new(opened.clone()))?;
        Ok(Self { open, opened })
    }
}

use crate::plugin::limits::DEFAULT_WRITE_TIMEOUT;

/// How a [`Breaker`] probes, and how long writes through a [`BreakerWriter`] may take.
#[derive(Clone, Debug)]
pub struct Config {
    probe_interval: Duration,
    probe_timeout: Duration,
    write_timeout: Duration,
}

impl Default for Config {
    /// Probes every 500 ms, each given 2 s (chosen here: dispatch resumes within half a second
    /// of the API server answering, at the cost of two cheap GETs a second while it does not);
    /// writes time out after [`DEFAULT_WRITE_TIMEOUT`].
    fn default() -> Self {
        Self {
            probe_interval: Duration::from_millis(500),
            probe_timeout: Duration::from_secs(2),
            write_timeout: DEFAULT_WRITE_TIMEOUT,
        }
    }
}

impl Config {
    /// Time between probes while open (default 500 ms).
    #[must_use]
    pub fn probe_interval(mut self, interval: Duration) -> Self {
        self.probe_interval = interval;
        self
    }

    /// How long one probe may take before it counts as unanswered (default 2 s).
    #[must_use]
    pub fn probe_timeout(mut self, timeout: Duration) -> Self {
        self.probe_timeout = timeout;
        self
    }

    /// How long a write may wait for its answer before it fails as `unavailable` (default
    /// [`DEFAULT_WRITE_TIMEOUT`]).
    #[must_use]
    pub fn write_timeout(mut self, timeout: Duration) -> Self {
        self.write_timeout = timeout;
        self
    }
}

/// The breaker; cheap to clone, clones share one state.
#[derive(Clone)]
pub struct Breaker(Arc<Inner>);

struct Inner {
    state: watch::Sender<State>,
    /// Times the breaker left `Closed`.
    trips: AtomicU64,
    /// Times a probe confirmed an outage (`Probing` → `Open`).
    outages: AtomicU64,
    probe: Probe,
    config: Config,
    metrics: Option<BreakerMetrics>,
}

/// A point in the breaker's history, taken before a reconcile (see [`Breaker::outage_since`]).
#[derive(Clone, Copy, Debug, Default)]
pub struct Mark {
    trips: u64,
    outages: u64,
}

impl Breaker {
    /// A closed breaker that asks `probe` whether the API server answers.
    pub fn new(config: Config, probe: Probe, metrics: Option<BreakerMetrics>) -> Self {
        let inner = Inner {
            state: watch::Sender::new(State::Closed),
            trips: AtomicU64::new(0),
            outages: AtomicU64::new(0),
            probe,
            config,
            metrics,
        };
        Self(Arc::new(inner))
    }

    /// A breaker probing `GET /readyz` through `client` (the host's own client, so it sees what
    /// the plugins' writes see; `/readyz` is exempt from API priority and fairness and fails as
    /// soon as a terminating apiserver stops serving).
    pub fn kube(client: kube::Client, config: Config, metrics: Option<BreakerMetrics>) -> Self {
        let probe: Probe = Arc::new(move || -> BoxFuture<'static, Result<(), String>> {
            let client = client.clone();
            Box::pin(async move {
                let request = http::Request::get("/readyz").body(Vec::new()).map_err(|e| e.to_string())?;
                client.request_text(request).await.map(drop).map_err(|e| e.to_string())
            })
        });
        Self::new(config, probe, metrics)
    }

    /// The state now.
    pub fn state(&self) -> State {
        *self.0.state.borrow()
    }

    /// Records a write's result: an `unavailable` error trips the breaker.
    pub fn record<T>(&self, result: &Result<T, CallError>) {
        if let Err(CallError::Unavailable(why)) = result {
            self.trip(why);
        }
    }

    /// Leaves `Closed` (if closed) and starts probing. Must run inside a tokio runtime.
    pub fn trip(&self, why: &str) {
        let inner = &*self.0;
        let tripped = inner.state.send_if_modified(|state| {
            let closed = *state == State::Closed;
            if closed {
                inner.trips.fetch_add(1, Ordering::SeqCst);
                *state = State::Probing;
            }
            closed
        });
        if tripped {
            tokio::spawn(self.clone().probe_until_answered(why.to_owned()));
        }
    }

    async fn probe_until_answered(self, why: String) {
        let inner = &*self.0;
        let opened_at = tokio::time::Instant::now();
        loop {
            let answer = match tokio::time::timeout(inner.config.probe_timeout, (inner.probe)()).await {
                Ok(answer) => answer,
                Err(_) => Err(format!("no answer within {:?}", inner.config.probe_timeout)),
            };
            match answer {
                Ok(()) => {
                    let was = inner.state.send_replace(State::Closed);
                    if was == State::Open {
                        if let Some(m) = &inner.metrics {
                            m.open.set(0);
                        }
                        tracing::info!(outage = ?opened_at.elapsed(), "the API server answers again; workers resume");
                    }
                    return;
                }
                Err(probe) => {
                    let opened = inner.state.send_if_modified(|state| {
                        let first = *state == State::Probing;
                        if first {
                            inner.outages.fetch_add(1, Ordering::SeqCst);
                            *state = State::Open;
                        }
                        first
                    });
                    if opened {
                        if let Some(m) = &inner.metrics {
                            m.open.set(1);
                            m.opened.inc();
                        }
                        tracing::warn!(error = %why, probe = %probe, "the API server does not answer; workers pause until it does");
                    }
                }
            }
            tokio::time::sleep(inner.config.probe_interval).await;
        }
    }

    /// Waits until the breaker is closed (at once if it is).
    pub async fn wait_closed(&self) {
        let mut state = self.0.state.subscribe();
        // The sender lives in `self`, so this cannot fail.
        let _ = state.wait_for(|s| *s == State::Closed).await;
    }

    /// Waits until the breaker is not closed (at once if it is not): workers stop waiting for
    /// a key then.
    pub async fn wait_tripped(&self) {
        let mut state = self.0.state.subscribe();
        // The sender lives in `self`, so this cannot fail.
        let _ = state.wait_for(|s| *s != State::Closed).await;
    }

    /// Where the breaker's history stands now.
    pub fn mark(&self) -> Mark {
        Mark { trips: self.0.trips.load(Ordering::SeqCst), outages: self.0.outages.load(Ordering::SeqCst) }
    }

    /// Whether an outage was confirmed since `mark`: after a failed reconcile, tells a failure
    /// the outage caused (re-add without backoff) from the key's own (backoff). If the breaker
    /// tripped since `mark`, waits for its first probe's answer.
    pub async fn outage_since(&self, mark: Mark) -> bool {
        let inner = &*self.0;
        if inner.trips.load(Ordering::SeqCst) == mark.trips {
            return false;
        }
        let mut state = inner.state.subscribe();
        let _ = state.wait_for(|s| *s != State::Probing).await;
        inner.outages.load(Ordering::SeqCst) != mark.outages
    }
}

/// An [`ApiWriter`] that bounds every write by the breaker's write timeout and reports every
/// result to a [`Breaker`].
pub struct BreakerWriter {
    inner: Arc<dyn ApiWriter>,
    breaker: Breaker,
}

impl BreakerWriter {
    /// Writes through `inner`, tripping `breaker` on `unavailable` answers and on writes the
    /// API server does not answer within the breaker's write timeout.
    pub fn new(inner: Arc<dyn ApiWriter>, breaker: Breaker) -> Self {
        Self { inner, breaker }
    }

    async fn seen<T>(&self, write: impl Future<Output = Result<T, CallError>>) -> Result<T, CallError> {
        let timeout = self.breaker.0.config.write_timeout;
        let result = tokio::time::timeout(timeout, write).await.unwrap_or_else(|_| {
            Err(CallError::Unavailable(format!(
                "the API server did not answer within {timeout:?} (the write timeout, which includes waiting for a write seat)"
            )))
        });
        self.breaker.record(&result);
        result
    }
}

#[async_trait]
impl ApiWriter for BreakerWriter {
    async fn send(&self, caller: &Caller, call: &ApiCall) -> Result<ApiReply, CallError> {
        self.seen(self.inner.send(caller, call)).await
    }

    async fn scope(&self, kind: &kube::core::GroupVersionKind) -> Result<crate::plugin::api::Scope, CallError> {
        self.seen(self.inner.scope(kind)).await
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, AtomicU32};

    use super::*;
    use crate::plugin::api::{ApiWriterExt, DeleteOptions, ObjectRef};

    /// A probe that answers while `up` is set, counting its calls; a `hang` probe never answers.
    struct Server {
        up: AtomicBool,
        hang: AtomicBool,
        probes: AtomicU32,
    }

    fn breaker(up: bool) -> (Breaker, Arc<Server>, BreakerMetrics) {
        let server =
            Arc::new(Server { up: AtomicBool::new(up), hang: AtomicBool::new(false), probes: AtomicU32::new(0) });
        let s = server.clone();
        let probe: Probe = Arc::new(move || -> BoxFuture<'static, Result<(), String>> {
            let s = s.clone();
            Box::pin(async move {
                s.probes.fetch_add(1, Ordering::SeqCst);
                if s.hang.load(Ordering::SeqCst) {
                    std::future::pending::<()>().await;
                }
                if s.up.load(Ordering::SeqCst) { Ok(()) } else { Err("connection refused".into()) }
            })
        });
        let metrics = BreakerMetrics::register(&Registry::new()).unwrap();
        (Breaker::new(Config::default(), probe, Some(metrics.clone())), server, metrics)
    }

    fn unavailable() -> Result<(), CallError> {
        Err(CallError::Unavailable("connection refused".into()))
    }

    #[tokio::test(start_paused = true)]
    async fn a_failure_the_probe_contradicts_is_the_keys_own_and_opens_nothing() {
        let (breaker, server, metrics) = breaker(true);
        let mark = breaker.mark();
        breaker.record(&unavailable());
        assert_eq!(breaker.state(), State::Probing);
        assert!(!breaker.outage_since(mark).await, "the API server answered the first probe");
        assert_eq!(breaker.state(), State::Closed);
        assert_eq!((metrics.opened.get(), server.probes.load(Ordering::SeqCst)), (0, 1));
    }

    #[tokio::test(start_paused = true)]
    async fn only_unavailable_errors_trip_the_breaker() {
        let (breaker, server, _) = breaker(false);
        for err in [CallError::NotFound, CallError::Conflict("c".into()), CallError::Forbidden("f".into())] {
            breaker.record(&Err::<(), _>(err));
        }
        breaker.record(&Ok::<(), CallError>(()));
        assert_eq!(breaker.state(), State::Closed);
        assert!(!breaker.outage_since(Mark::default()).await);
        assert_eq!(server.probes.load(Ordering::SeqCst), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn an_unanswered_probe_opens_the_breaker_until_a_probe_answers() {
        let (breaker, server, metrics) = breaker(false);
        let mark = breaker.mark();
        breaker.record(&unavailable());
        assert!(breaker.outage_since(mark).await, "the first probe failed: an outage");
        assert_eq!((breaker.state(), metrics.open.get(), metrics.opened.get()), (State::Open, 1, 1));

        // Workers wait; further failures while open neither reopen it nor start more probes.
        let waiter = tokio::spawn({
            let breaker = breaker.clone();
            async move { breaker.wait_closed().await }
        });
        for _ in 0..100 {
            breaker.record(&unavailable());
        }
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert!(!waiter.is_finished(), "workers stay paused while the API server does not answer");
        let probes = server.probes.load(Ordering::SeqCst);
        assert!((20..=22).contains(&probes), "one probe every 500 ms, not one per failure: {probes}");

        server.up.store(true, Ordering::SeqCst);
        tokio::time::timeout(Duration::from_millis(600), waiter)
            .await
            .expect("closed within a probe interval")
            .unwrap();
        assert_eq!((breaker.state(), metrics.open.get(), metrics.opened.get()), (State::Closed, 0, 1));
        assert!(!breaker.outage_since(breaker.mark()).await, "a new mark sees no outage");
    }

    /// A writer whose API server never answers (SIGSTOPped: connections accepted, no reply).
    struct Hung;

    #[async_trait]
    impl ApiWriter for Hung {
        async fn send(&self, _: &Caller, _: &ApiCall) -> Result<ApiReply, CallError> {
            std::future::pending().await
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_write_the_api_server_never_answers_fails_as_unavailable_and_opens_the_breaker() {
        let (breaker, server, metrics) = breaker(true);
        server.hang.store(true, Ordering::SeqCst);
        let writer = BreakerWriter::new(Arc::new(Hung), breaker.clone());
        let target = ObjectRef {
            kind: kube::core::GroupVersionKind::gvk("", "v1", "ConfigMap"),
            namespace: Some("a".into()),
            name: "b".into(),
        };
        let mark = breaker.mark();
        let started = tokio::time::Instant::now();
        let result = writer.delete(&Caller::new("p"), target, DeleteOptions::default()).await;
        assert!(matches!(result, Err(CallError::Unavailable(_))), "{result:?}");
        assert_eq!(started.elapsed(), DEFAULT_WRITE_TIMEOUT, "the write timed out after the write timeout");
        assert!(breaker.outage_since(mark).await, "the probe hangs too: an outage");
        assert_eq!((breaker.state(), metrics.open.get()), (State::Open, 1));
    }

    #[tokio::test(start_paused = true)]
    async fn a_probe_that_hangs_counts_as_unanswered_after_its_timeout() {
        let (breaker, server, _) = breaker(true);
        server.hang.store(true, Ordering::SeqCst);
        breaker.trip("writes fail while watches stay open");
        tokio::time::sleep(Duration::from_millis(2001)).await;
        assert_eq!(breaker.state(), State::Open, "a terminating apiserver that holds connections is down");
        server.hang.store(false, Ordering::SeqCst);
        breaker.wait_closed().await;
        assert_eq!(breaker.state(), State::Closed);
    }
}
