//! The optional kube-controller-manager: garbage collection and namespace deletion for tests.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::apiserver::READY_TIMEOUT;
use crate::process::Supervised;

/// The controllers it runs: only those whose absence a test of ours can notice. Owner-reference
/// garbage collection and namespace deletion; no service accounts, tokens, nodes or workloads.
const CONTROLLERS: &str = "garbagecollector,namespace";

/// Starts kube-controller-manager against the apiserver in `kubeconfig` and waits for `/healthz`.
pub(crate) async fn start(binary: &Path, kubeconfig: &Path, dir: &Path, port: u16) -> anyhow::Result<Supervised> {
    let started = Instant::now();
    let kubeconfig = kubeconfig.display();
    let args = vec![
        format!("--kubeconfig={kubeconfig}"),
        format!("--authentication-kubeconfig={kubeconfig}"),
        format!("--authorization-kubeconfig={kubeconfig}"),
        format!("--controllers={CONTROLLERS}"),
        "--leader-elect=false".to_owned(),
        "--bind-address=127.0.0.1".to_owned(),
        format!("--secure-port={port}"),
        format!("--cert-dir={}", dir.join("controller-manager-certs").display()),
    ];
    let mut process =
        Supervised::spawn("kube-controller-manager", binary, &args, &dir.join("kube-controller-manager.log"))?;
    // It serves /healthz with a self-signed certificate; `/healthz` is always allowed.
    let mut config = kube::Config::new(format!("https://127.0.0.1:{port}").parse()?);
    config.accept_invalid_certs = true;
    let client = kube::Client::try_from(config)?;
    let mut last_error;
    loop {
        process.check_running()?;
        match client.request_text(http::Request::get("/healthz").body(Vec::new())?).await {
            Ok(body) if body.trim() == "ok" => return Ok(process),
            Ok(body) => last_error = body,
            Err(e) => last_error = e.to_string(),
        }
        if started.elapsed() > READY_TIMEOUT {
            anyhow::bail!(
                "kube-controller-manager not healthy after {READY_TIMEOUT:?}: {last_error}\n{}",
                process.log_tail()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
