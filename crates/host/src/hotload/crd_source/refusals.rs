//! A WasmPlugin's plugin refused at run time by the API server, or on an object another plugin
//! made: its status is reported again.

use std::collections::HashMap;
use std::time::Duration;

use tokio::sync::broadcast::error::RecvError;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::informer::Informer;
use crate::plugin::refusals::Refusals;
use crate::queue::WorkQueue;

/// Queues the WasmPlugin of each plugin with a new refusal its status shows ([`Refusals`]), at
/// most once per `every` for one plugin: a plugin refused on every reconcile has its status
/// written again at that pace, not at its own. Names that are not
/// WasmPlugins (directory plugins) are left alone. Ends with `shutdown`.
pub(super) fn refusal_trigger(
    refusals: &Refusals,
    plugins: Informer,
    queue: WorkQueue<String>,
    every: Duration,
    shutdown: CancellationToken,
) {
    let mut announced = refusals.subscribe();
    tokio::spawn(async move {
        let mut queued: HashMap<String, Instant> = HashMap::new();
        loop {
            let name = tokio::select! {
                _ = shutdown.cancelled() => return,
                next = announced.recv() => match next {
                    Ok(name) => name,
                    // Those dropped are taken on the plugins' next reports.
                    Err(RecvError::Lagged(_)) => continue,
                    Err(RecvError::Closed) => return,
                },
            };
            if plugins.store().get(None, &name).is_none() {
                continue;
            }
            let now = Instant::now();
            match queued.get(&name).map(|at| now.duration_since(*at)).filter(|since| *since < every) {
                Some(since) => queue.add_after(name.clone(), every - since),
                None => queue.add(name.clone()),
            }
            queued.insert(name, now);
        }
    });
}
