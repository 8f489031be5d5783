//! add/get/done throughput of [`WorkQueue`] over 100k distinct keys with 1 and 4 worker tasks:
//! the peer of `benches/go/workqueue` (client-go), run beside it by `benches/workqueue.sh`.
//!
//! A plain main (`harness = false`) so both programs measure the same thing the same way: one
//! producer adds every key while the workers get and done them, then the queue is shut down; a
//! round ends when every worker has seen the shutdown. Prints `RESULT <impl> <workers> <ops/s>`
//! with the median of 11 rounds after a warm-up round.

use std::time::{Duration, Instant};

use kubewasm_host::controller::ObjectKey;
use kubewasm_host::queue::{Config, Key, WorkQueue};

const KEYS: usize = 100_000;
const ROUNDS: usize = 11;

async fn round<K: Key>(keys: Vec<K>, workers: usize) -> Duration {
    let queue = WorkQueue::new(Config::default().name("bench"));
    let start = Instant::now();
    let tasks: Vec<_> = (0..workers)
        .map(|_| {
            let queue = queue.clone();
            tokio::spawn(async move {
                let mut processed = 0usize;
                while let Some(key) = queue.get().await {
                    queue.done(&key);
                    processed += 1;
                }
                processed
            })
        })
        .collect();
    // The producer runs on the calling (block_on) thread, outside the worker pool, as informer
    // callbacks do; benches/HISTORY.md ("Methodology note") says why it is not a pool task.
    for key in keys {
        queue.add(key);
    }
    queue.shut_down();
    let mut processed = 0;
    for task in tasks {
        processed += task.await.expect("worker");
    }
    let elapsed = start.elapsed();
    assert_eq!(processed, KEYS, "every key is processed once");
    elapsed
}

async fn measure<K: Key>(label: &str, keys: &[K], workers: usize) {
    round(keys.to_vec(), workers).await; // warm-up
    let mut times = Vec::with_capacity(ROUNDS);
    for _ in 0..ROUNDS {
        let keys = keys.to_vec();
        times.push(round(keys, workers).await);
    }
    times.sort();
    let median = times[ROUNDS / 2];
    println!("RESULT {label} {workers} {:.0}", KEYS as f64 / median.as_secs_f64());
}

fn main() {
    // Same parallelism as Go's default GOMAXPROCS: one scheduler thread per CPU.
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    let strings: Vec<String> = (0..KEYS).map(|i| format!("namespace-{}/object-{i}", i % 100)).collect();
    // The controllers' key type: shared like a Go string (immutable, copied by pointer).
    let shared: Vec<ObjectKey> = strings.iter().map(|s| ObjectKey::from(s.as_str())).collect();
    runtime.block_on(async {
        for workers in [1, 4] {
            measure("kubewasm/String", &strings, workers).await;
            measure("kubewasm/ObjectKey", &shared, workers).await;
        }
    });
}
