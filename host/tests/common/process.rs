//! `kubewasm run` as a child process: its admin endpoints, and stopping it by signal.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

use kube::Client;
use kube::api::{Api, PostParams};

use super::metric_value;

/// A running `kubewasm run`, killed when dropped (so a failed test leaves no process behind).
pub struct HostProcess {
    child: Child,
    /// Its admin address, `127.0.0.1:PORT`.
    pub addr: String,
}

/// `kubewasm run --plugins <plugins> --admin-addr <free port>`, ready for more arguments.
pub fn kubewasm_run(plugins: &Path) -> (Command, String) {
    let addr = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().to_string();
    let mut command = Command::new(env!("CARGO_BIN_EXE_kubewasm"));
    command
        .args(["--log", "warn", "run", "--plugins"])
        .arg(plugins)
        .args(["--admin-addr", &addr])
        .stdout(Stdio::null());
    (command, addr)
}

impl HostProcess {
    /// Spawns `command` (from [`kubewasm_run`]).
    pub fn spawn(mut command: Command, addr: String) -> Self {
        Self { child: command.spawn().expect("spawning kubewasm"), addr }
    }

    /// The process id.
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// `GET path` on the admin server: the whole response, or `None` if it is not up.
    pub fn get(&self, path: &str) -> Option<String> {
        let mut stream = TcpStream::connect(&self.addr).ok()?;
        write!(stream, "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").ok()?;
        let mut out = String::new();
        stream.read_to_string(&mut out).ok()?;
        Some(out)
    }

    /// A sample from `/metrics`.
    pub fn metric(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        metric_value(&self.get("/metrics")?, name, labels)
    }

    /// Waits for `/readyz` 200; panics if the process exits first.
    pub async fn ready(&mut self, timeout: Duration) {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!("kubewasm exited with {status} before it was ready");
            }
            if self.get("/readyz").is_some_and(|r| r.starts_with("HTTP/1.1 200")) {
                return;
            }
            assert!(tokio::time::Instant::now() < deadline, "kubewasm not ready within {timeout:?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Sends `signal` (e.g. `-KILL`, `-TERM`).
    pub fn signal(&self, signal: &str) {
        let sent = Command::new("kill").arg(signal).arg(self.child.id().to_string()).status().unwrap();
        assert!(sent.success(), "kill {signal} {}", self.child.id());
    }

    /// Waits for the process to exit.
    pub async fn exited(&mut self, timeout: Duration) -> ExitStatus {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(tokio::time::Instant::now() < deadline, "kubewasm did not exit within {timeout:?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for HostProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A token for ServiceAccount `namespace/name`, from the TokenRequest API (what the kubelet
/// mounts into a pod), valid for an hour.
pub async fn service_account_token(client: &Client, namespace: &str, name: &str) -> String {
    use k8s_openapi::api::authentication::v1::TokenRequest;
    use k8s_openapi::api::core::v1::ServiceAccount;
    let request: TokenRequest =
        serde_json::from_value(serde_json::json!({"spec": {"audiences": [], "expirationSeconds": 3600}})).unwrap();
    let api = Api::<ServiceAccount>::namespaced(client.clone(), namespace);
    let issued: TokenRequest = api
        .create_subresource("token", name, &PostParams::default(), &request)
        .await
        .unwrap_or_else(|e| panic!("TokenRequest for {namespace}/{name}: {e}"));
    issued.status.and_then(|s| s.token).expect("a token in the TokenRequest status")
}

/// A kubeconfig for `server` (CA file `ca`) authenticating with `token`.
pub fn token_kubeconfig(server: &str, ca: &Path, token: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {server}\n    \
         certificate-authority: {}\nusers:\n- name: u\n  user:\n    token: {token}\ncontexts:\n\
         - name: c\n  context:\n    cluster: c\n    user: u\ncurrent-context: c\n",
        ca.display()
    )
}
