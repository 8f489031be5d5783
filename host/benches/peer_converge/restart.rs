//! The restart phase: once a round has settled, its controllers are killed and started again
//! over the converged objects; what they send then, and how long until they are idle.

use std::collections::{BTreeMap, VecDeque};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant, SystemTime};

use k8s_openapi::jiff::Timestamp;

use crate::audit::{AuditTail, is_write};
use crate::procs::Procs;
use crate::report::median;
use crate::round::Outcome;
use crate::variant::Variant;

/// How often the phase samples the processes' CPU and the audit log.
const POLL: Duration = Duration::from_millis(50);

/// The controllers are busy while they used at least [`BUSY_SHARE`] of one CPU over the last
/// [`BUSY_WINDOW`]. A second, not one sample: Linux counts CPU time in 10 ms ticks, so one tick of
/// an idle process's timers would make a 50 ms sample look 20% busy.
const BUSY_WINDOW: Duration = Duration::from_secs(1);
const BUSY_SHARE: f64 = 0.05;

/// What a restart measured.
#[derive(Clone, Debug)]
pub struct Restart {
    /// Seconds from the start until the controllers were idle: the later of their last write and
    /// the last CPU they used while busy (≥ 5% of a CPU over a second), followed by the round's
    /// quiet time.
    pub idle: f64,
    /// Writes (create, update, patch, delete) the restarted controllers sent.
    pub writes: u64,
    /// CPU seconds the restarted controllers used until idle.
    pub cpu: f64,
    /// Their API requests by verb.
    pub requests: BTreeMap<String, u64>,
}

/// Starts `commands` (the killed controllers' again), the API server auditing to `log`, and
/// waits until they are idle for `quiet`.
pub fn run(
    commands: Vec<Command>,
    log: &Path,
    work: &Path,
    label: &str,
    quiet: Duration,
    timeout: Duration,
) -> Restart {
    let since = Timestamp::try_from(SystemTime::now()).unwrap();
    let started = Instant::now();
    let mut procs = Procs::spawn(commands, work, &format!("{label}-restart"));
    let mut audit = AuditTail::new(log, since);
    let (mut last_busy, mut last_used, mut cpu) = (started, started, 0.0);
    let mut window: VecDeque<(Instant, f64)> = VecDeque::from([(started, 0.0)]);
    loop {
        std::thread::sleep(POLL);
        procs.check_running();
        audit.poll();
        let now = Instant::now();
        let used = procs.cpu_seconds();
        if used > cpu {
            last_used = now;
        }
        cpu = used;
        window.push_back((now, used));
        while window.len() > 2 && now - window[1].0 >= BUSY_WINDOW {
            window.pop_front();
        }
        let (since_at, since_cpu) = window[0];
        if used - since_cpu >= BUSY_SHARE * (now - since_at).as_secs_f64().max(BUSY_WINDOW.as_secs_f64()) {
            last_busy = last_used;
        }
        let last_write = audit
            .last_write
            .map_or(started, |t| started + Duration::from_secs_f64(t.duration_since(since).as_secs_f64().max(0.0)));
        let idle_at = last_busy.max(last_write);
        if now.saturating_duration_since(idle_at) >= quiet {
            let requests = audit.requests.clone();
            let writes = requests.iter().filter(|(verb, _)| is_write(verb)).map(|(_, n)| n).sum();
            return Restart { idle: (idle_at - started).as_secs_f64(), writes, cpu, requests };
        }
        assert!(started.elapsed() < timeout, "{label} was not idle {timeout:?} after its restart");
    }
}

/// One round's restart, under its converge line.
pub fn line(round: usize, variant: Variant, r: &Restart) {
    let each: Vec<String> = r.requests.iter().map(|(v, n)| format!("{v} {n}")).collect();
    println!(
        "|   restart {round} | {} | idle after {:.2} s | {} writes | CPU {:.2} s | {} |",
        variant.name(),
        r.idle,
        r.writes,
        r.cpu,
        each.join(", ")
    );
}

/// Medians of the restarts per variant, and kubewasm's against each controller-runtime variant.
pub fn summary(results: &[(usize, Variant, Outcome)]) {
    let mut by_variant: BTreeMap<Variant, Vec<&Restart>> = BTreeMap::new();
    for (_, variant, outcome) in results {
        if let Some(r) = &outcome.restart {
            by_variant.entry(*variant).or_default().push(r);
        }
    }
    if by_variant.is_empty() {
        return;
    }
    let m: BTreeMap<Variant, (f64, f64, f64)> = by_variant
        .iter()
        .map(|(v, rs)| {
            let of = |f: fn(&Restart) -> f64| median(rs.iter().map(|r| f(r)).collect());
            (*v, (of(|r| r.idle), of(|r| r.writes as f64), of(|r| r.cpu)))
        })
        .collect();
    println!();
    println!("restart over the converged objects (medians):");
    println!("| variant | idle after s | writes | CPU s |\n|---|---:|---:|---:|");
    for (v, (idle, writes, cpu)) in &m {
        println!("| {} | {idle:.2} | {writes:.0} | {cpu:.2} |", v.name());
    }
    println!("| kubewasm | vs | idle after | writes | CPU |\n|---|---|---:|---:|---:|");
    for (ours, x) in m.iter().filter(|(v, _)| !v.is_peer()) {
        for (theirs, y) in m.iter().filter(|(v, _)| v.is_peer()) {
            let ratio = |a: f64, b: f64| if b > 0.0 { format!("{:.3}x", a / b) } else { "-".to_owned() };
            println!(
                "| {} | {} | {} | {} | {} |",
                ours.name(),
                theirs.name(),
                ratio(x.0, y.0),
                ratio(x.1, y.1),
                ratio(x.2, y.2)
            );
        }
    }
}
