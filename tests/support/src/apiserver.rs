//! The kube-apiserver of a test control plane: its flags, start-up and readiness.

use std::path::Path;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Namespace;
use kube::Api;

use crate::pki::Pki;
use crate::process::Supervised;

/// How long the apiserver may take to report `/readyz` ok (envtest allows 20 s; a cold start on a
/// busy 2-core CI machine needs more).
pub(crate) const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// envtest's flags (controller-runtime `pkg/internal/testing/controlplane/apiserver.go`), with token
/// authentication instead of envtest's client certificates. `extra` comes last: for scalar flags
/// the last occurrence wins.
pub(crate) fn args(etcd_url: &str, port: u16, dir: &Path, pki: &Pki, extra: &[String]) -> Vec<String> {
    let file = |p: &Path| p.display().to_string();
    let mut args = vec![
        format!("--etcd-servers={etcd_url}"),
        "--bind-address=127.0.0.1".to_owned(),
        "--advertise-address=127.0.0.1".to_owned(),
        // Since 1.37 the endpoint reconciler refuses a loopback advertise address; with no nodes
        // and no in-cluster clients nothing needs the `kubernetes` Service's endpoints anyway.
        "--endpoint-reconciler-type=none".to_owned(),
        format!("--secure-port={port}"),
        format!("--cert-dir={}", dir.join("apiserver-certs").display()),
        format!("--tls-cert-file={}", file(&pki.serving_cert_file)),
        format!("--tls-private-key-file={}", file(&pki.serving_key_file)),
        format!("--token-auth-file={}", file(&pki.token_file)),
        "--authorization-mode=RBAC".to_owned(),
        "--service-cluster-ip-range=10.0.0.0/24".to_owned(),
        "--allow-privileged=true".to_owned(),
        // No controller-manager creates the `default` ServiceAccount, so this plugin would reject every pod.
        "--disable-admission-plugins=ServiceAccount".to_owned(),
        format!("--service-account-issuer=https://127.0.0.1:{port}/"),
        format!("--service-account-key-file={}", file(&pki.sa_public_key_file)),
        format!("--service-account-signing-key-file={}", file(&pki.sa_signing_key_file)),
    ];
    args.extend(extra.iter().cloned());
    args
}

/// Waits until `/readyz` answers ok (RBAC bootstrap roles are one of its post-start hooks) and the
/// `default` namespace exists (made by the apiserver's own bootstrap controller, not in `/readyz`).
pub(crate) async fn wait_ready(process: &mut Supervised, admin: &kube::Config, started: Instant) -> anyhow::Result<()> {
    let deadline = started + READY_TIMEOUT;
    let client = kube::Client::try_from(admin.clone())?;
    let mut last_error;
    loop {
        process.check_running()?;
        let request = http::Request::get("/readyz").body(Vec::new())?;
        match client.request_text(request).await {
            Ok(body) if body.trim() == "ok" => break,
            Ok(body) => last_error = body,
            Err(e) => last_error = e.to_string(),
        }
        if Instant::now() > deadline {
            anyhow::bail!("kube-apiserver not ready after {READY_TIMEOUT:?}: {last_error}\n{}", process.log_tail());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let namespaces: Api<Namespace> = Api::all(client);
    loop {
        process.check_running()?;
        match namespaces.get_opt("default").await {
            Ok(Some(_)) => return Ok(()),
            Ok(None) => last_error = "namespace default does not exist yet".to_owned(),
            Err(e) => last_error = e.to_string(),
        }
        if Instant::now() > deadline {
            anyhow::bail!("kube-apiserver ready but {last_error}\n{}", process.log_tail());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
