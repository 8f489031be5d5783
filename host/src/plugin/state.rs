//! Per-reconcile store state (`PluginCtx`): WASI context, limits, host-call budget and the
//! plugin's shared handles.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use tokio::io::AsyncWrite;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use super::grants::Grants;
use super::host::{ApiWriter, CacheReader};
use super::limits::{LimitHit, Limiter, Limits};
use super::metrics::PluginMetrics;
use super::protected::Protected;

/// What every reconcile of one plugin version shares.
pub(crate) struct PluginShared {
    pub(crate) name: Arc<str>,
    /// Field manager and event reporter: `kubewasm/<name>`.
    pub(crate) manager: String,
    pub(crate) grants: Grants,
    /// Host objects no plugin may write.
    pub(crate) protected: Protected,
    pub(crate) limits: Limits,
    /// The operator's settings as JSON.
    pub(crate) settings: Vec<u8>,
    pub(crate) cache: Arc<dyn CacheReader>,
    pub(crate) writer: Arc<dyn ApiWriter>,
    pub(crate) metrics: PluginMetrics,
}

/// Store data of one plugin instance; lives for one reconcile (or one describe/map call).
pub struct PluginCtx {
    wasi: WasiCtx,
    table: ResourceTable,
    pub(crate) limiter: Limiter,
    pub(crate) shared: Arc<PluginShared>,
    calls_left: u32,
    /// Calls refused by the grants during this call, for the `AccessDenied` event.
    pub(crate) denied: Vec<String>,
}

impl PluginCtx {
    pub(crate) fn new(shared: Arc<PluginShared>) -> Self {
        // Deny by default: no preopens, sockets, env or args; stdin is empty; output is logged.
        let wasi = WasiCtx::builder()
            .stdout(GuestLog { plugin: shared.name.clone(), stream: "stdout" })
            .stderr(GuestLog { plugin: shared.name.clone(), stream: "stderr" })
            .build();
        Self {
            wasi,
            table: ResourceTable::new(),
            limiter: Limiter::new(shared.limits.clone()),
            calls_left: shared.limits.host_calls,
            denied: Vec::new(),
            shared,
        }
    }

    /// Readies a reused instance's state for another call: a full host-call budget, no refused
    /// calls and no limit hit carried over.
    pub(crate) fn begin_call(&mut self) {
        self.calls_left = self.shared.limits.host_calls;
        self.denied.clear();
        self.limiter.hit = None;
    }

    /// Charges one host call to the budget; past it, the call traps with [`LimitHit::HostCalls`].
    pub(crate) fn charge(&mut self) -> wasmtime::Result<()> {
        if self.calls_left == 0 {
            let hit = LimitHit::HostCalls(self.shared.limits.host_calls);
            self.limiter.hit.get_or_insert(hit.clone());
            return Err(wasmtime::Error::new(hit));
        }
        self.calls_left -= 1;
        Ok(())
    }

    /// Counts a finished host call in the metrics.
    pub(crate) fn count(&self, function: &'static str, result: &'static str) {
        self.shared.metrics.host_call(&self.shared.name, function, result);
    }
}

impl WasiView for PluginCtx {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.wasi, table: &mut self.table }
    }
}

/// Longest guest output line kept; longer lines are cut. Protects the host's log pipeline.
pub const MAX_LOG_LINE: usize = 4096;

/// A guest's stdout or stderr, written line by line to `tracing` under the plugin's name.
#[derive(Clone)]
struct GuestLog {
    plugin: Arc<str>,
    stream: &'static str,
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

    fn push(&mut self, mut bytes: &[u8]) {
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
