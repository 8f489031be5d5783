//! The write scheduler on virtual time, with a fake API server: each request holds its seat for
//! the backend's latency.

use std::sync::atomic::{AtomicUsize, Ordering};

use super::*;

const PACE: Duration = Duration::from_millis(10);

/// A backend answering every request after `PACE`.
async fn write(scheduler: &Scheduler, plugin: &str) {
    let seat = scheduler.seat(plugin).await;
    tokio::time::sleep(PACE).await;
    seat.done(Answer::Answered);
}

/// `workers` tasks of `plugin`, each writing in a loop until `until`; returns the count written
/// by then.
fn greedy(scheduler: &Scheduler, plugin: &'static str, workers: usize, until: Instant) -> Arc<AtomicUsize> {
    let written = Arc::new(AtomicUsize::new(0));
    for _ in 0..workers {
        let (scheduler, written) = (scheduler.clone(), written.clone());
        tokio::spawn(async move {
            while Instant::now() < until {
                write(&scheduler, plugin).await;
                if Instant::now() <= until {
                    written.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
    }
    written
}

#[tokio::test(start_paused = true)]
async fn a_plugin_alone_is_never_slowed_below_the_backends_pace() {
    let scheduler = Scheduler::new(Config::default().max_seats(16));
    let started = Instant::now();
    let workers: Vec<_> = (0..16)
        .map(|_| {
            let scheduler = scheduler.clone();
            tokio::spawn(async move {
                for _ in 0..100 {
                    write(&scheduler, "alone").await;
                }
            })
        })
        .collect();
    for worker in workers {
        worker.await.unwrap();
    }
    assert_eq!(started.elapsed(), PACE * 100, "16 workers × 100 writes at 10 ms each, all 16 in flight at once");
    assert_eq!(scheduler.seats(), 16, "steady latency never shrank the seats");
    assert_eq!(scheduler.in_flight(), 0, "every seat came back");
}

#[tokio::test(start_paused = true)]
async fn two_greedy_plugins_each_get_half_the_seats() {
    let scheduler = Scheduler::new(Config::default().max_seats(4).min_seats(4));
    let until = Instant::now() + Duration::from_secs(1);
    let a = greedy(&scheduler, "a", 8, until);
    let b = greedy(&scheduler, "b", 8, until);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (a, b) = (a.load(Ordering::Relaxed), b.load(Ordering::Relaxed));
    assert_eq!(a + b, 400, "4 seats busy for 1 s at 10 ms a write: the budget is all used");
    // `a` asked first and took all four seats for the first round, alone; then two each.
    assert_eq!((a, b), (4 + 2 * 99, 2 * 99), "an equal share each once both wait");
}

#[tokio::test(start_paused = true)]
async fn a_plugins_one_write_waits_for_one_seat_however_many_its_neighbour_queued() {
    let scheduler = Scheduler::new(Config::default().max_seats(4).min_seats(4));
    let until = Instant::now() + Duration::from_secs(1);
    greedy(&scheduler, "greedy", 64, until);
    tokio::time::sleep(Duration::from_millis(105)).await;
    let asked = Instant::now();
    let seat = scheduler.seat("neighbour").await;
    assert!(asked.elapsed() <= PACE, "served at the next seat to come free: {:?}", asked.elapsed());
    seat.done(Answer::Answered);
}

#[tokio::test(start_paused = true)]
async fn a_429_pauses_that_plugin_for_its_retry_after_while_another_goes_on() {
    let scheduler = Scheduler::new(Config::default().max_seats(8));
    scheduler.seat("pushed").await.done(Answer::TooManyRequests(Duration::from_secs(2)));
    assert_eq!(scheduler.seats(), 4, "the seats halved");

    let asked = Instant::now();
    scheduler.seat("other").await.done(Answer::Answered);
    assert_eq!(asked.elapsed(), Duration::ZERO, "another plugin is not paused");
    scheduler.seat("pushed").await.done(Answer::Answered);
    assert_eq!(asked.elapsed(), Duration::from_secs(2), "the pushed-back plugin waited its Retry-After, then resumed");
}

#[tokio::test(start_paused = true)]
async fn rising_latency_shrinks_the_seats_and_steady_latency_grows_them_back() {
    let scheduler = Scheduler::new(Config::default().max_seats(16));
    let answer = |latency| {
        let scheduler = scheduler.clone();
        async move {
            let seat = scheduler.seat("p").await;
            tokio::time::sleep(latency).await;
            seat.done(Answer::Answered);
        }
    };
    for _ in 0..20 {
        answer(PACE).await;
    }
    for _ in 0..50 {
        answer(PACE * 10).await;
    }
    let shrunk = scheduler.seats();
    assert!(shrunk < 16, "ten times the latency shrank the seats: {shrunk}");
    for _ in 0..2000 {
        answer(PACE).await;
    }
    assert_eq!(scheduler.seats(), 16, "back to the most once latency settled");
}

#[tokio::test(start_paused = true)]
async fn a_caller_that_stops_waiting_takes_no_seat() {
    let scheduler = Scheduler::new(Config::default().max_seats(1).min_seats(1));
    let held = scheduler.seat("a").await;
    let gave_up = tokio::time::timeout(Duration::from_millis(5), scheduler.seat("b")).await;
    assert!(gave_up.is_err(), "no seat while the one seat is held");
    drop(held);
    assert_eq!(scheduler.in_flight(), 0, "the seat was not handed to the caller that left");
    let again = tokio::time::timeout(Duration::from_millis(5), scheduler.seat("c")).await;
    assert!(again.is_ok(), "the next caller gets it at once");
}

#[tokio::test(start_paused = true)]
async fn the_seats_never_fall_below_the_least() {
    let scheduler = Scheduler::new(Config::default().max_seats(8).min_seats(2));
    for _ in 0..10 {
        scheduler.seat("p").await.done(Answer::TooManyRequests(Duration::ZERO));
    }
    assert_eq!(scheduler.seats(), 2);
}

/// A fake API server on one core: a request's latency is `PACE` times the requests in flight
/// (processor sharing), so every request a neighbour keeps in flight slows it.
#[derive(Clone, Default)]
struct SharedServer(Arc<AtomicUsize>);

impl SharedServer {
    async fn write(&self, scheduler: &Scheduler, plugin: &str) -> Duration {
        let seat = scheduler.seat(plugin).await;
        let sent = Instant::now();
        let in_flight = self.0.fetch_add(1, Ordering::SeqCst) + 1;
        tokio::time::sleep(PACE * in_flight as u32).await;
        self.0.fetch_sub(1, Ordering::SeqCst);
        seat.done(Answer::Answered);
        sent.elapsed()
    }

    /// `workers` tasks of `plugin` writing back to back until `until`; the count written.
    fn greedy(&self, scheduler: &Scheduler, plugin: &'static str, workers: usize, until: Instant) -> Arc<AtomicUsize> {
        let written = Arc::new(AtomicUsize::new(0));
        for _ in 0..workers {
            let (server, scheduler, written) = (self.clone(), scheduler.clone(), written.clone());
            tokio::spawn(async move {
                while Instant::now() < until {
                    server.write(&scheduler, plugin).await;
                    written.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        written
    }
}

#[tokio::test(start_paused = true)]
async fn a_heavy_plugin_is_paced_while_a_light_neighbour_writes_and_freed_once_it_stops() {
    let scheduler = Scheduler::new(Config::default().max_seats(16).min_seats(16));
    let server = SharedServer::default();
    let start = Instant::now();
    let written = server.greedy(&scheduler, "greedy", 16, start + Duration::from_secs(20));
    let rate_between = |from: u64, to: u64| {
        let written = written.clone();
        async move {
            tokio::time::sleep_until(start + Duration::from_secs(from)).await;
            let before = written.load(Ordering::Relaxed);
            tokio::time::sleep_until(start + Duration::from_secs(to)).await;
            (written.load(Ordering::Relaxed) - before) as f64 / (to - from) as f64
        }
    };

    let alone = rate_between(1, 2).await;
    assert!(alone >= 90.0, "alone, the greedy plugin fills the server: {alone}/s");
    let greedy_beside = tokio::spawn(rate_between(4, 6));
    let mut took = Vec::new();
    while Instant::now() < start + Duration::from_secs(6) {
        took.push(server.write(&scheduler, "neighbour").await);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let beside = greedy_beside.await.unwrap();
    assert!(beside < alone / 2.0, "paced beside the neighbour: {beside}/s against {alone}/s alone");
    assert!(beside >= 10.0, "never starved: {beside}/s");
    let settled = &took[took.len() / 2..];
    let mean = settled.iter().sum::<Duration>() / settled.len() as u32;
    // Unpaced, each of its writes would share the server with the greedy plugin's 16: 17 × PACE.
    assert!(
        mean <= PACE.mul_f64(1.5),
        "the neighbour's latency stays near its unloaded {PACE:?}: mean {mean:?} (greedy {beside}/s)"
    );

    // Within two seconds: a neighbour gone quiet does not hold it at its least rate.
    let again = rate_between(8, 9).await;
    assert!(again > alone * 0.9, "back to full speed once the neighbour stopped: {again}/s against {alone}/s");
}

/// A neighbour whose writes are answered fast (5 ms, as a create-only apply is) and that writes
/// one Namespace's worth every 50 ms: between its writes it has nothing in flight and has used
/// the server for only a few milliseconds, yet it is writing, and a heavy plugin yields to it
/// from its first answer on, not once its use has added up.
#[tokio::test(start_paused = true)]
async fn a_heavy_plugin_yields_from_a_neighbours_first_fast_answer_on() {
    let scheduler = Scheduler::new(Config::default().max_seats(16).min_seats(16));
    let start = Instant::now();
    let written = greedy(&scheduler, "greedy", 16, start + Duration::from_secs(10));
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut between = Vec::new();
    for _ in 0..5 {
        let seat = scheduler.seat("neighbour").await;
        tokio::time::sleep(Duration::from_millis(5)).await;
        seat.done(Answer::Answered);
        let before = written.load(Ordering::Relaxed);
        tokio::time::sleep(Duration::from_millis(50)).await;
        between.push(written.load(Ordering::Relaxed) - before);
    }
    // Unpaced, 16 seats at 10 ms write 80 in 50 ms; paced from its least rate (10/s), one or two.
    assert!(between.iter().all(|&n| n <= 5), "greedy writes in each 50 ms after a neighbour's answer: {between:?}");
}

/// A neighbour that writes twice a second, each answered in the same 5 ms, gives few answers to
/// learn from and a latency that never moves; the heavy plugin's pace still grows with the time
/// the neighbour stays within target, not with the count of its answers, so it is not held near
/// its least rate for good.
#[tokio::test(start_paused = true)]
async fn a_heavy_plugin_beside_a_sparse_neighbour_within_target_regains_its_pace() {
    let scheduler = Scheduler::new(Config::default().max_seats(16).min_seats(16));
    let start = Instant::now();
    let written = greedy(&scheduler, "greedy", 16, start + Duration::from_secs(30));
    let neighbour = tokio::spawn({
        let scheduler = scheduler.clone();
        async move {
            for _ in 0..50 {
                let seat = scheduler.seat("neighbour").await;
                tokio::time::sleep(Duration::from_millis(5)).await;
                seat.done(Answer::Answered);
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    });
    tokio::time::sleep(Duration::from_secs(12)).await;
    let before = written.load(Ordering::Relaxed);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rate = (written.load(Ordering::Relaxed) - before) as f64 / 2.0;
    neighbour.abort();
    // Alone it writes 1,600/s; a growth per answer (two a second) would hold it below 40/s.
    assert!(rate >= 200.0, "the greedy plugin's pace 12 to 14 s beside a neighbour writing twice a second: {rate}/s");
}

/// The value of gauge `name`, or the sum of histogram `name` over all its plugins, in `registry`.
fn sample(registry: &prometheus::Registry, name: &str) -> f64 {
    let family = registry.gather().into_iter().find(|f| f.name() == name).expect("the metric is registered");
    let value = |m: &prometheus::proto::Metric| {
        if name.ends_with("_seconds") { m.get_histogram().get_sample_sum() } else { m.get_gauge().get_value() }
    };
    family.get_metric().iter().map(value).sum()
}

#[tokio::test(start_paused = true)]
async fn the_metrics_show_the_seats_those_in_use_and_how_long_a_plugin_waited() {
    let registry = prometheus::Registry::new();
    let metrics = FairMetrics::register(&registry).unwrap();
    let scheduler = Scheduler::new(Config::default().max_seats(1).min_seats(1)).metrics(metrics);
    let held = scheduler.seat("a").await;
    let waiting = tokio::spawn({
        let scheduler = scheduler.clone();
        async move { scheduler.seat("b").await.done(Answer::Answered) }
    });
    tokio::time::sleep(Duration::from_millis(30)).await;
    assert_eq!(
        (sample(&registry, "kubewasm_write_seats"), sample(&registry, "kubewasm_write_seats_in_use")),
        (1.0, 1.0)
    );
    held.done(Answer::Answered);
    waiting.await.unwrap();
    assert_eq!(sample(&registry, "kubewasm_write_seats_in_use"), 0.0);
    let waited = sample(&registry, "kubewasm_plugin_write_seat_wait_seconds");
    assert!((waited - 0.030).abs() < 1e-9, "a waited nothing, b the 30 ms a held its seat: {waited}");
}
