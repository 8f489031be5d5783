//! Per-reconcile store state (`PluginCtx`): WASI context, limits, host-call budget and the
//! plugin's shared handles.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use tokio::io::AsyncWrite;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};
use wasmtime_wasi::{HostWallClock, WasiCtx, WasiCtxView, WasiView};

use super::api::{ApiWriter, CacheReader, Caller};
use super::authorizer::Authorizer;
use super::limits::{Limiter, Limits};
use super::metrics::PluginMetrics;
use super::throttle::WriteLimiter;
#[cfg(test)]
use super::throttle::WriteRate;

/// What every reconcile of one plugin version shares.
pub(crate) struct PluginShared {
    pub(crate) name: Arc<str>,
    /// Whom its requests are sent for: its identity and field manager.
    pub(crate) caller: Caller,
    /// Decides every request the plugin makes.
    pub(crate) authorizer: Authorizer,
    pub(crate) limits: Limits,
    /// The operator's settings as JSON.
    pub(crate) settings: Vec<u8>,
    pub(crate) cache: Arc<dyn CacheReader>,
    pub(crate) writer: Arc<dyn ApiWriter>,
    /// The plugin's write token bucket (`limits.writeQps`).
    pub(crate) write_limiter: Arc<WriteLimiter>,
    /// The plugin's Event token bucket (same rate); Events past it are dropped.
    pub(crate) event_limiter: Arc<WriteLimiter>,
    /// The plugin's output bucket: `limits.outputBytes` a second across all its calls (a byte a
    /// token); lines past it are dropped, so a plugin cannot flood the log by calling often.
    pub(crate) output_limiter: Arc<WriteLimiter>,
    pub(crate) metrics: PluginMetrics,
    /// Where a request the API server refused is kept for the plugin's status.
    pub(crate) refusals: crate::refusals::Refusals,
    /// What the plugin reads from the wall clock, if fixed (`RuntimeConfig::fixed_wall_clock`).
    pub(crate) wall_clock: Option<SystemTime>,
}

/// Store data of one plugin instance; lives for one reconcile (or one describe/map call).
pub struct PluginCtx {
    wasi: WasiCtx,
    table: ResourceTable,
    pub(crate) limiter: Limiter,
    pub(crate) shared: Arc<PluginShared>,
    /// Host calls left to this call (`limits.hostCalls`); `host` charges them.
    pub(crate) calls_left: u32,
    /// Calls refused by the grants during this call, for the `AccessDenied` event.
    pub(crate) denied: Vec<String>,
    /// Writes the API server rejected as invalid during this call, for the `WriteRejected`
    /// event: which write and the server's message.
    pub(crate) rejected: Vec<String>,
    /// When the current call's deadline passes (set with the epoch deadline).
    pub(crate) until: tokio::time::Instant,
    /// The desired state this call's reconcile returned (contract 0.3), once made so or not.
    pub(crate) desired: Option<super::outcome::Desired>,
    output: Arc<OutputBudget>,
}

impl PluginCtx {
    /// Whether the instance holds a host resource (a stream, say) in its table.
    pub(crate) fn holds_resources(&self) -> bool {
        !self.table.is_empty()
    }

    pub(crate) fn new(shared: Arc<PluginShared>) -> Self {
        let output = Arc::new(OutputBudget::new(shared.limits.output_bytes));
        let log = |stream| GuestLog {
            plugin: shared.name.clone(),
            stream,
            budget: output.clone(),
            rate: shared.output_limiter.clone(),
            metrics: shared.metrics.clone(),
        };
        // Deny by default: no preopens, env or args; stdin is empty; output is logged within a
        // budget. No sockets: wasmtime-wasi 48 leaves TCP, UDP and name lookup off unless
        // allowed, and this says so explicitly, so a change of its defaults cannot open them.
        let mut wasi = WasiCtx::builder();
        wasi.stdout(log("stdout")).stderr(log("stderr")).allow_tcp(false).allow_udp(false).allow_ip_name_lookup(false);
        if let Some(at) = shared.wall_clock {
            wasi.wall_clock(FixedClock(at));
        }
        let wasi = wasi.build();
        Self {
            wasi,
            table: ResourceTable::new(),
            limiter: Limiter::new(shared.limits.clone()),
            calls_left: shared.limits.host_calls,
            denied: Vec::new(),
            rejected: Vec::new(),
            until: tokio::time::Instant::now() + shared.limits.deadline(),
            desired: None,
            output,
            shared,
        }
    }

    /// Readies a reused instance's state for another call: a full host-call budget and output
    /// budget, no refused or rejected calls and no limit hit carried over.
    pub(crate) fn begin_call(&mut self) {
        self.calls_left = self.shared.limits.host_calls;
        self.denied.clear();
        self.rejected.clear();
        self.desired = None;
        self.limiter.hit = None;
        self.output.reset(self.shared.limits.output_bytes);
    }

    /// What the guest's language runtime printed about a failure at the end of this call's
    /// stderr (a panic, an uncaught exception), if anything.
    pub(crate) fn guest_failure(&self) -> Option<String> {
        super::guest_error::describe(&self.output.stderr_tail.lock().text())
    }
}

impl WasiView for PluginCtx {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.wasi, table: &mut self.table }
    }
}

/// A wall clock that always reads one time.
struct FixedClock(SystemTime);

impl HostWallClock for FixedClock {
    fn resolution(&self) -> Duration {
        Duration::from_nanos(1)
    }

    fn now(&self) -> Duration {
        self.0.duration_since(UNIX_EPOCH).unwrap_or_default()
    }
}

/// Longest guest output line kept; longer lines are cut. Protects the host's log pipeline.
pub const MAX_LOG_LINE: usize = 4096;

/// Bytes of stdout and stderr left to the current call (`limits.outputBytes`), shared by both
/// streams.
#[derive(Debug)]
struct OutputBudget {
    left: AtomicU64,
    /// Whether this call's dropping has been logged.
    warned: AtomicBool,
    /// The end of this call's stderr, budget or not: what a trap's error quotes.
    stderr_tail: parking_lot::Mutex<super::guest_error::Tail>,
}

impl OutputBudget {
    fn new(bytes: u64) -> Self {
        Self { left: AtomicU64::new(bytes), warned: AtomicBool::new(false), stderr_tail: Default::default() }
    }

    fn reset(&self, bytes: u64) {
        self.left.store(bytes, Ordering::Relaxed);
        self.warned.store(false, Ordering::Relaxed);
        self.stderr_tail.lock().clear();
    }

    /// Takes up to `n` bytes of the budget; returns how many it got.
    fn take(&self, n: usize) -> usize {
        let n = n as u64;
        let before = self.left.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |left| Some(left.saturating_sub(n)));
        before.unwrap_or(0).min(n) as usize
    }
}

/// A guest's stdout or stderr, written line by line to `tracing` under the plugin's name.
#[derive(Clone)]
struct GuestLog {
    plugin: Arc<str>,
    stream: &'static str,
    budget: Arc<OutputBudget>,
    /// The plugin's output per second, shared by its instances.
    rate: Arc<WriteLimiter>,
    metrics: PluginMetrics,
}

impl IsTerminal for GuestLog {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for GuestLog {
    fn async_stream(&self) -> Box<dyn AsyncWrite + Send + Sync> {
        Box::new(LineWriter::new(self.clone()))
    }

    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(LineWriter::new(self.clone()))
    }
}

/// Buffers bytes until a newline, then emits one log event per line.
struct LineWriter {
    target: GuestLog,
    line: Vec<u8>,
}

impl LineWriter {
    fn new(target: GuestLog) -> Self {
        Self { target, line: Vec::new() }
    }

    /// Takes `bytes` within the call's output budget; the rest is dropped and counted.
    fn push(&mut self, bytes: &[u8]) {
        if self.target.stream == "stderr" {
            self.target.budget.stderr_tail.lock().push(bytes);
        }
        let kept = self.target.budget.take(bytes.len());
        if kept < bytes.len() {
            let target = &self.target;
            target.metrics.output_dropped(&target.plugin, target.stream, (bytes.len() - kept) as u64);
            if !target.budget.warned.swap(true, Ordering::Relaxed) {
                tracing::warn!(target: "kubewasm::plugin::output", plugin = %target.plugin, stream = target.stream, "the plugin wrote more than its limits.outputBytes to stdout/stderr in one call; the rest of this call's output is dropped");
            }
        }
        self.push_lines(&bytes[..kept]);
    }

    fn push_lines(&mut self, mut bytes: &[u8]) {
        while let Some(i) = bytes.iter().position(|b| *b == b'\n') {
            self.extend(&bytes[..i]);
            self.emit();
            bytes = &bytes[i + 1..];
        }
        self.extend(bytes);
    }

    fn extend(&mut self, bytes: &[u8]) {
        let room = MAX_LOG_LINE.saturating_sub(self.line.len());
        self.line.extend_from_slice(&bytes[..bytes.len().min(room)]);
    }

    fn emit(&mut self) {
        if self.line.is_empty() {
            return;
        }
        let target = &self.target;
        if !target.rate.try_acquire_n(self.line.len()) {
            target.metrics.output_dropped(&target.plugin, target.stream, self.line.len() as u64);
            self.line.clear();
            return;
        }
        let text = String::from_utf8_lossy(&self.line);
        tracing::info!(target: "kubewasm::plugin::output", plugin = %self.target.plugin, stream = self.target.stream, "{text}");
        self.line.clear();
    }
}

impl Drop for LineWriter {
    fn drop(&mut self) {
        self.emit();
    }
}

#[async_trait::async_trait]
impl OutputStream for LineWriter {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        self.push(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        Ok(64 * 1024)
    }
}

#[async_trait::async_trait]
impl Pollable for LineWriter {
    async fn ready(&mut self) {}
}

impl AsyncWrite for LineWriter {
    fn poll_write(self: Pin<&mut Self>, _: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        self.get_mut().push(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.get_mut().emit();
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dropped(registry: &prometheus::Registry, stream: &str) -> u64 {
        let families = registry.gather();
        let family = families.iter().find(|f| f.name() == "kubewasm_plugin_output_dropped_bytes_total");
        family
            .into_iter()
            .flat_map(|f| f.get_metric())
            .find(|m| m.get_label().iter().any(|l| l.name() == "stream" && l.value() == stream))
            .map_or(0, |m| m.get_counter().get_value() as u64)
    }

    #[test]
    fn output_past_the_calls_budget_is_dropped_and_counted_per_stream() {
        let registry = prometheus::Registry::new();
        let metrics = PluginMetrics::register(&registry).unwrap();
        let budget = Arc::new(OutputBudget::new(150));
        let rate = Arc::new(WriteLimiter::new(WriteRate { qps: 0, burst: 0 }));
        let log = GuestLog { plugin: "loud".into(), stream: "stdout", budget: budget.clone(), rate, metrics };
        let mut stdout = LineWriter::new(log.clone());
        let mut stderr = LineWriter::new(GuestLog { stream: "stderr", ..log });
        stdout.push(&[b'x'; 100]);
        stderr.push(&[b'y'; 100]);
        stdout.push(&[b'z'; 10]);
        assert_eq!((stdout.line.len(), stderr.line.len()), (100, 50), "both streams share one budget");
        assert_eq!((dropped(&registry, "stdout"), dropped(&registry, "stderr")), (10, 50));
        budget.reset(150);
        assert_eq!(budget.take(200), 150, "the next call has a full budget");
    }

    #[tokio::test(start_paused = true)]
    async fn output_past_the_plugins_bytes_per_second_is_dropped_across_calls() {
        let registry = prometheus::Registry::new();
        let metrics = PluginMetrics::register(&registry).unwrap();
        let rate = Arc::new(WriteLimiter::new(WriteRate { qps: 100, burst: 100 }));
        let call = || {
            let budget = Arc::new(OutputBudget::new(1000));
            LineWriter::new(GuestLog {
                plugin: "chatty".into(),
                stream: "stdout",
                budget,
                rate: rate.clone(),
                metrics: metrics.clone(),
            })
        };
        // Each call is within its own 1000-byte budget; together they pass the plugin's 100 bytes/s.
        call().push(&[b'x'; 61]);
        assert_eq!(dropped(&registry, "stdout"), 0, "the first call's line fits the rate");
        call().push(&[b'y'; 60]);
        assert_eq!(dropped(&registry, "stdout"), 60, "the next call's line in the same second is dropped");
        tokio::time::advance(std::time::Duration::from_secs(1)).await;
        call().push(&[b'w'; 60]);
        assert_eq!(dropped(&registry, "stdout"), 60, "a second later the rate allows a line again");
    }
}
