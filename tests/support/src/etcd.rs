//! The etcd behind a test control plane, and the bits of its HTTP/JSON gateway tests need.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::process::Supervised;

/// A running single-member etcd on loopback.
#[derive(Debug)]
pub(crate) struct Etcd {
    pub(crate) process: Supervised,
    pub(crate) client_port: u16,
}

impl Etcd {
    /// Starts etcd with a data dir under `dir` and waits (until `deadline`) for `/health`.
    /// Retries on fresh ports when a port picked as free was taken meanwhile.
    pub(crate) async fn start(binary: &Path, dir: &Path, deadline: Instant) -> anyhow::Result<Self> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let client_port = free_port()?;
            let peer_port = free_port()?;
            let client = format!("http://127.0.0.1:{client_port}");
            let peer = format!("http://127.0.0.1:{peer_port}");
            let args = vec![
                "--name=default".to_owned(),
                format!("--data-dir={}", dir.join("etcd").display()),
                format!("--listen-client-urls={client}"),
                format!("--advertise-client-urls={client}"),
                format!("--listen-peer-urls={peer}"),
                format!("--initial-advertise-peer-urls={peer}"),
                format!("--initial-cluster=default={peer}"),
                // Tests never need durability; fsync dominates etcd's latency on CI disks (envtest does the same).
                "--unsafe-no-fsync=true".to_owned(),
            ];
            let mut process = Supervised::spawn("etcd", binary, &args, &dir.join("etcd.log"))?;
            match wait_healthy(&mut process, client_port, deadline).await {
                Ok(()) => return Ok(Self { process, client_port }),
                Err(e) if attempt < 3 && process.log_tail().contains("address already in use") => {
                    drop((process, e));
                    let _ = std::fs::remove_dir_all(dir.join("etcd"));
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// `http://127.0.0.1:PORT`
    pub(crate) fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.client_port)
    }
}

async fn wait_healthy(process: &mut Supervised, port: u16, deadline: Instant) -> anyhow::Result<()> {
    loop {
        process.check_running()?;
        if let Ok((200, body)) = http(port, "GET", "/health", None).await
            && body.contains("\"health\":\"true\"")
        {
            return Ok(());
        }
        if Instant::now() > deadline {
            anyhow::bail!("etcd did not become healthy in time\n{}", process.log_tail());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Compacts etcd to its current revision through the JSON gateway: `/v3/kv/range` for
/// `header.revision`, then `/v3/kv/compaction` (physical, so it is done when this returns).
pub(crate) async fn compact(port: u16) -> anyhow::Result<i64> {
    // Key "\0" (base64 "AA==") with range_end "\0" means every key; count_only keeps it small.
    let (status, body) =
        http(port, "POST", "/v3/kv/range", Some(r#"{"key":"AA==","range_end":"AA==","count_only":true}"#)).await?;
    anyhow::ensure!(status == 200, "etcd range: HTTP {status}: {body}");
    let json: serde_json::Value = serde_json::from_str(&body).context("etcd range response")?;
    // int64 fields are strings in proto3 JSON.
    let revision: i64 = match &json["header"]["revision"] {
        serde_json::Value::String(s) => s.parse()?,
        serde_json::Value::Number(n) => n.as_i64().context("revision")?,
        other => anyhow::bail!("etcd range: no header.revision in {other}: {body}"),
    };
    let request = serde_json::json!({ "revision": revision.to_string(), "physical": true }).to_string();
    let (status, body) = http(port, "POST", "/v3/kv/compaction", Some(&request)).await?;
    anyhow::ensure!(status == 200, "etcd compaction to {revision}: HTTP {status}: {body}");
    Ok(revision)
}

/// Puts key `/kubewasm-testenv/advance` `writes` times through the JSON gateway (each put is
/// one revision); the apiserver reads nothing outside `/registry`.
pub(crate) async fn advance(port: u16, writes: u32) -> anyhow::Result<()> {
    // base64 of "/kubewasm-testenv/advance" and of "x".
    let request = r#"{"key":"L2t1YmV3YXNtLXRlc3RlbnYvYWR2YW5jZQ==","value":"eA=="}"#;
    for _ in 0..writes {
        let (status, body) = http(port, "POST", "/v3/kv/put", Some(request)).await?;
        anyhow::ensure!(status == 200, "etcd put: HTTP {status}: {body}");
    }
    Ok(())
}

/// One HTTP/1.0 request to 127.0.0.1:`port` (no chunking, the server closes): (status, body).
async fn http(port: u16, method: &str, path: &str, body: Option<&str>) -> anyhow::Result<(u16, String)> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).await?;
    let body = body.unwrap_or("");
    let request = format!(
        "{method} {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await?;
    let response = String::from_utf8_lossy(&response);
    let (head, body) = response.split_once("\r\n\r\n").context("malformed HTTP response")?;
    let status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).context("no HTTP status")?;
    Ok((status, body.to_owned()))
}

/// A port that was free a moment ago on 127.0.0.1 (the envtest approach; a race is retried by callers).
pub(crate) fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}
