//! The workers against a fake reconcile, in virtual time: gates, deferral, hand-off and resizing.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::future::BoxFuture;
use prometheus::Registry;
use tokio::sync::{mpsc, oneshot};

use super::*;
use crate::breaker::{Config as BreakerConfig, Probe, State};
use crate::controller::ControllerMetrics;
use crate::plugin::Action;
use crate::queue::Config;
use crate::shard::HashRange;

const SECOND: Duration = Duration::from_secs(1);
/// Less than any backoff or probe interval: lets every task run that can, and no timer fire.
const TICK: Duration = Duration::from_millis(1);

/// One call of the fake: the key, its attempt, and where the test answers. Dropping the answer
/// makes the fake panic, as a host function's bug would.
struct Call {
    key: ObjectKey,
    attempt: u32,
    answer: oneshot::Sender<Result<Action, CallFailed>>,
}

impl Call {
    fn done(self) -> ObjectKey {
        let _ = self.answer.send(Ok(Action::Done));
        self.key
    }

    fn fail(self) -> ObjectKey {
        let _ = self.answer.send(Err(CallFailed::Plugin("the API server is unavailable".into())));
        self.key
    }
}

/// A reconcile that hands every call to the test and returns what the test answers.
struct Fake {
    max_concurrent: u32,
    calls: mpsc::UnboundedSender<Call>,
}

impl Reconcile for Fake {
    fn name(&self) -> &str {
        "fake"
    }

    fn revision(&self) -> u64 {
        1
    }

    fn max_concurrent(&self) -> u32 {
        self.max_concurrent
    }

    fn sees_key(&self, key: &ObjectKey) -> bool {
        key.namespace() != Some("hidden")
    }

    fn reconcile(&self, key: &ObjectKey, attempt: u32) -> impl Future<Output = Result<Action, CallFailed>> + Send {
        let (answer, answered) = oneshot::channel();
        let _ = self.calls.send(Call { key: key.clone(), attempt, answer });
        async move { answered.await.unwrap_or_else(|_| panic!("a host function failed")) }
    }
}

/// Running workers over a fake, and the calls it receives.
struct Harness {
    workers: Arc<Workers<Fake>>,
    calls: mpsc::UnboundedReceiver<Call>,
    sender: mpsc::UnboundedSender<Call>,
}

impl Harness {
    /// `max_concurrent` workers, built further by `build`, running.
    fn start(max_concurrent: u32, build: impl FnOnce(Workers<Fake>) -> Workers<Fake>) -> Self {
        let (sender, calls) = mpsc::unbounded_channel();
        let metrics = ControllerMetrics::register(&Registry::new()).unwrap().controller("fake");
        let fake = Arc::new(Fake { max_concurrent, calls: sender.clone() });
        let workers = Arc::new(build(Workers::new(fake, WorkQueue::new(Config::default()), metrics, None)));
        tokio::spawn(workers.clone().run());
        Self { workers, calls, sender }
    }

    fn queue(&self) -> &WorkQueue<ObjectKey> {
        self.workers.queue()
    }

    fn add(&self, key: &str) -> ObjectKey {
        let (namespace, name) = key.split_once('/').unwrap();
        let key = ObjectKey::new(Some(namespace), name);
        self.workers.enqueue(key.clone());
        key
    }

    /// The next call the fake receives, within a minute of virtual time (a test missing its
    /// call fails instead of waiting forever).
    async fn call(&mut self) -> Call {
        let call = tokio::time::timeout(60 * SECOND, self.calls.recv()).await.expect("a call within a minute");
        call.expect("the harness holds a sender")
    }

    /// Asserts that no call arrived since the last one was taken.
    fn no_call(&mut self, why: &str) {
        assert!(self.calls.try_recv().is_err(), "{why}");
    }
}

/// Lets every task run until all wait for something, then `d` of virtual time pass.
async fn pass(d: Duration) {
    tokio::time::sleep(d).await;
}

/// A breaker whose probe answers while the flag it returns is set.
fn breaker() -> (Breaker, Arc<AtomicBool>) {
    let up = Arc::new(AtomicBool::new(true));
    let answers = up.clone();
    let probe: Probe = Arc::new(move || -> BoxFuture<'static, Result<(), String>> {
        let up = answers.load(Ordering::SeqCst);
        Box::pin(async move { if up { Ok(()) } else { Err("connection refused".into()) } })
    });
    (Breaker::new(BreakerConfig::default(), probe, None), up)
}

/// Opens `breaker` as a reconcile's unavailable write would, the API server not answering.
fn outage(breaker: &Breaker, up: &AtomicBool) {
    up.store(false, Ordering::SeqCst);
    breaker.trip("connection refused");
}

#[tokio::test(start_paused = true)]
async fn a_reconcile_failing_in_an_outage_is_queued_again_without_backoff_and_no_worker_takes_a_key_while_the_breaker_is_open()
 {
    let (breaker, up) = breaker();
    let mut h = Harness::start(2, |w| w.breaker(breaker.clone()));
    let a = h.add("ns/a");
    let call = h.call().await;
    outage(&breaker, &up);
    call.fail();
    pass(SECOND).await;
    assert_eq!(breaker.state(), State::Open);
    let b = h.add("ns/b");
    pass(10 * SECOND).await;
    h.no_call("neither the re-added key nor a new one is taken, by the paused worker or the idle one");
    assert_eq!(h.queue().len(), 2, "both wait in the queue");
    assert_eq!(h.queue().num_requeues(&a), 0, "the outage's failure charged no backoff");

    up.store(true, Ordering::SeqCst);
    let (first, second) = (h.call().await, h.call().await);
    assert_eq!((first.attempt, second.attempt), (0, 0));
    let mut keys = [first.done(), second.done()];
    keys.sort_by(|x, y| x.as_str().cmp(y.as_str()));
    assert_eq!(keys, [a, b], "both reconciled once the breaker closed");
}

#[tokio::test(start_paused = true)]
async fn a_worker_paused_by_the_breaker_stops_at_once_when_made_surplus() {
    let (breaker, up) = breaker();
    let h = Harness::start(3, |w| w.breaker(breaker.clone()));
    pass(SECOND).await;
    outage(&breaker, &up);
    pass(SECOND).await;
    assert_eq!((breaker.state(), h.workers.running()), (State::Open, 3));
    h.workers.set_workers(1);
    pass(SECOND).await;
    assert_eq!(h.workers.running(), 1, "the surplus paused workers did not wait for the API server");
}

#[tokio::test(start_paused = true)]
async fn a_key_the_shard_gate_does_not_admit_is_forgotten_not_reconciled() {
    let gate = ShardGate::sharded();
    let mut h = Harness::start(1, |w| w.shard(gate.clone()));
    let a = ObjectKey::new(Some("ns"), "a");
    // One failure on record, as a key reconciled here before its range moved away has.
    h.queue().add_rate_limited(a.clone());
    pass(SECOND).await;
    h.no_call("a replica serving nothing reconciles nothing");
    assert!(h.queue().is_empty());
    assert_eq!(h.queue().num_requeues(&a), 0, "forgotten: not retried with backoff");

    gate.serve(Some(HashRange::FULL)).await;
    h.add("ns/a");
    let call = h.call().await;
    assert_eq!((call.key.clone(), call.attempt), (a, 0), "admitted once its range is served");
}

/// A canary stand-in: keeps what it was offered and the key's failures on record then.
struct Offers {
    queue: WorkQueue<ObjectKey>,
    seen: parking_lot::Mutex<Vec<(Served, u32)>>,
}

impl Offer for Offers {
    fn offer(&self, served: Served) {
        let requeues = self.queue.num_requeues(&served.key);
        self.seen.lock().push((served, requeues));
    }
}

#[tokio::test(start_paused = true)]
async fn a_served_reconcile_is_offered_to_the_canary_once_its_key_is_settled_and_a_deferred_one_is_not() {
    let (breaker, up) = breaker();
    let mut h = Harness::start(1, |w| w.breaker(breaker.clone()));
    let offers = Arc::new(Offers { queue: h.queue().clone(), seen: parking_lot::Mutex::default() });
    h.workers.set_canary(Some(offers.clone()));
    let a = h.add("ns/a");

    h.call().await.fail();
    pass(TICK).await;
    {
        let seen = offers.seen.lock();
        let [(served, requeues)] = &seen[..] else { panic!("one offer: {}", seen.len()) };
        assert_eq!((&served.key, served.attempt, served.side.error.is_some()), (&a, 0, true));
        assert_eq!(*requeues, 1, "offered after the key was settled: its failure was on record");
    }

    let retry = h.call().await;
    assert_eq!(retry.attempt, 1);
    outage(&breaker, &up);
    retry.fail();
    pass(10 * SECOND).await;
    assert_eq!(offers.seen.lock().len(), 1, "a reconcile the outage cut short is not compared");

    up.store(true, Ordering::SeqCst);
    let retry = h.call().await;
    assert_eq!(retry.attempt, 1, "deferred without backoff");
    retry.done();
    pass(TICK).await;
    let seen = offers.seen.lock();
    let (served, requeues) = seen.last().unwrap();
    assert_eq!((seen.len(), served.attempt, served.side.error.is_none(), *requeues), (2, 1, true, 0));
}

#[tokio::test(start_paused = true)]
async fn a_downsize_stops_workers_waiting_for_a_key_at_once() {
    let mut h = Harness::start(3, |w| w);
    pass(SECOND).await;
    assert_eq!(h.workers.running(), 3);
    h.workers.set_workers(1);
    pass(TICK).await;
    assert_eq!(h.workers.running(), 1, "no key came, yet the surplus workers stopped");
    h.add("ns/a");
    h.add("ns/b");
    let _a = h.call().await;
    pass(SECOND).await;
    h.no_call("one worker: b waits for a");
}

#[tokio::test(start_paused = true)]
async fn a_downsize_lets_busy_surplus_workers_finish_their_key_without_taking_another() {
    let mut h = Harness::start(3, |w| w);
    for key in ["ns/a", "ns/b", "ns/c"] {
        h.add(key);
    }
    let busy = [h.call().await, h.call().await, h.call().await];
    h.workers.set_workers(1);
    pass(SECOND).await;
    assert_eq!(h.workers.running(), 3, "each finishes the key it holds");
    h.add("ns/d");
    h.add("ns/e");
    busy.into_iter().for_each(|call| drop(call.done()));
    let d = h.call().await;
    pass(SECOND).await;
    assert_eq!(h.workers.running(), 1);
    h.no_call("the surplus workers took neither d nor e");
    d.done();
    assert_eq!(h.call().await.key.name(), "e");
}

#[tokio::test(start_paused = true)]
async fn an_upsize_by_a_new_version_starts_more_workers_at_once() {
    let mut h = Harness::start(1, |w| w);
    h.add("ns/a");
    h.add("ns/b");
    let a = h.call().await;
    pass(SECOND).await;
    h.no_call("one worker: b waits for a");
    h.workers.swap(Arc::new(Fake { max_concurrent: 2, calls: h.sender.clone() }));
    let b = h.call().await;
    assert_eq!((a.key.name(), b.key.name(), h.workers.running()), ("a", "b", 2));
}

#[tokio::test(start_paused = true)]
async fn a_host_panic_during_a_reconcile_is_retried_with_backoff_and_the_worker_lives_on() {
    let mut h = Harness::start(1, |w| w);
    h.add("ns/a");
    drop(h.call().await);
    let retry = h.call().await;
    assert_eq!((retry.key.name(), retry.attempt), ("a", 1));
    assert_eq!((h.workers.metrics().panics.get(), h.workers.running()), (1, 1));
}

#[tokio::test(start_paused = true)]
async fn a_key_the_serving_version_may_not_see_is_never_queued() {
    let (calls, _) = mpsc::unbounded_channel();
    let metrics = ControllerMetrics::register(&Registry::new()).unwrap().controller("fake");
    let fake = Arc::new(Fake { max_concurrent: 1, calls });
    let workers = Workers::new(fake, WorkQueue::new(Config::default()), metrics, None);
    workers.enqueue(ObjectKey::new(Some("hidden"), "a"));
    assert!(workers.queue().is_empty(), "the fake does not see namespace hidden");
    workers.enqueue(ObjectKey::new(Some("ns"), "a"));
    assert_eq!(workers.queue().len(), 1);
}
