//! The admin server: `/metrics` (Prometheus text), `/healthz`, `/livez` and `/readyz`.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use parking_lot::RwLock;
use prometheus::{Encoder, Registry, TextEncoder};

/// Named readiness checks; ready when there is at least one and all pass.
#[derive(Clone, Default)]
pub struct Readiness(Arc<RwLock<BTreeMap<String, bool>>>);

impl Readiness {
    /// Sets check `name` (e.g. `informer Namespace` or `plugin namespace-defaults`).
    pub fn set(&self, name: impl Into<String>, ok: bool) {
        self.0.write().insert(name.into(), ok);
    }

    /// Removes a check (an unloaded plugin, a released informer).
    pub fn remove(&self, name: &str) {
        self.0.write().remove(name);
    }

    /// Whether every check passes.
    pub fn is_ready(&self) -> bool {
        let checks = self.0.read();
        !checks.is_empty() && checks.values().all(|ok| *ok)
    }

    fn report(&self) -> String {
        self.0.read().iter().map(|(name, ok)| format!("[{}] {name}\n", if *ok { "+" } else { "-" })).collect()
    }
}

#[derive(Clone)]
struct AdminState {
    registry: Registry,
    readiness: Readiness,
}

/// The admin routes.
pub fn router(registry: Registry, readiness: Readiness) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok" }))
        .route("/livez", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .with_state(AdminState { registry, readiness })
}

async fn metrics(State(state): State<AdminState>) -> Result<String, (StatusCode, String)> {
    let mut buf = Vec::new();
    TextEncoder::new()
        .encode(&state.registry.gather(), &mut buf)
        .map_err(|e| (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    String::from_utf8(buf).map_err(|e| (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))
}

async fn readyz(State(state): State<AdminState>) -> (StatusCode, String) {
    let code = if state.readiness.is_ready() { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    (code, state.readiness.report())
}

/// Serves the admin routes on `addr` until `shutdown` resolves; returns the bound address.
pub async fn serve(
    addr: SocketAddr,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<std::io::Result<()>>)> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let task = tokio::spawn(async move { axum::serve(listener, router).with_graceful_shutdown(shutdown).await });
    Ok((bound, task))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readiness_needs_every_check_and_at_least_one() {
        let r = Readiness::default();
        assert!(!r.is_ready(), "nothing registered yet is not ready");
        r.set("informer Namespace", false);
        r.set("plugin a", true);
        assert!(!r.is_ready());
        r.set("informer Namespace", true);
        assert!(r.is_ready());
        assert_eq!(r.report(), "[+] informer Namespace\n[+] plugin a\n");
    }

    #[tokio::test]
    async fn the_admin_server_answers_metrics_and_probes() {
        let registry = Registry::new();
        let c = prometheus::IntCounter::new("kubewasm_test_total", "test").unwrap();
        registry.register(Box::new(c.clone())).unwrap();
        c.inc();
        let readiness = Readiness::default();
        readiness.set("plugin a", false);
        let (addr, _task) =
            serve("127.0.0.1:0".parse().unwrap(), router(registry, readiness.clone()), std::future::pending())
                .await
                .unwrap();
        let get = |path: &'static str| async move {
            let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            stream
                .write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes())
                .await
                .unwrap();
            let mut out = String::new();
            stream.read_to_string(&mut out).await.unwrap();
            out
        };
        assert!(get("/metrics").await.contains("kubewasm_test_total 1"));
        assert!(get("/livez").await.starts_with("HTTP/1.1 200"));
        assert!(get("/readyz").await.starts_with("HTTP/1.1 503"));
        readiness.set("plugin a", true);
        assert!(get("/readyz").await.starts_with("HTTP/1.1 200"));
    }
}
