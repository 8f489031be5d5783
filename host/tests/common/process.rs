//! `kubewasm run` as a child process: its admin endpoints, and stopping it by signal.

use std::collections::HashSet;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use kube::Client;
use kube::api::{Api, PostParams};

use super::metric_value;

/// The admin address to give a host: any free port, which the host binds itself. A port picked
/// by the test and handed over could be taken by another process first (concurrent tests start
/// hosts), and the test would then talk to that process.
pub const ANY_PORT: &str = "127.0.0.1:0";

/// A running `kubewasm run`, killed when dropped (so a failed test leaves no process behind).
pub struct HostProcess {
    child: Child,
    /// Its admin address, found once it listens.
    addr: OnceLock<SocketAddr>,
}

/// `kubewasm run --plugins <plugins> --admin-addr 127.0.0.1:0 --impersonate-plugins=false`, ready
/// for more arguments: the tests that use it are about the host's process (shutdown, leadership,
/// readiness, chaos) on a control plane without plugin identities, so plugins are sent as the
/// host, as the flag says; a test of identities adds `--impersonate-plugins` (the last one counts).
pub fn kubewasm_run(plugins: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_kubewasm"));
    command
        .args(["--log", "warn", "run", "--plugins"])
        .arg(plugins)
        .args(["--admin-addr", ANY_PORT, "--impersonate-plugins=false"])
        .stdout(Stdio::null());
    command
}

/// The IPv4 TCP address that process `pid` (or, through wrappers that fork, one of its
/// descendants) listens on, from `/proc`; `None` until it listens. Hand-written: no crate
/// maps a process to its sockets this simply.
pub fn listening_addr(pid: u32) -> Option<SocketAddr> {
    let sockets: HashSet<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .into_iter()
        .flatten()
        .filter_map(|entry| std::fs::read_link(entry.ok()?.path()).ok())
        .filter_map(|link| Some(link.to_str()?.strip_prefix("socket:[")?.strip_suffix(']')?.to_owned()))
        .collect();
    let table = std::fs::read_to_string(format!("/proc/{pid}/net/tcp")).unwrap_or_default();
    // `sl local_address rem_address st ... inode`: addresses are hex `IP:PORT`, the IP in host
    // (little-endian) byte order; state 0A is LISTEN; the inode is the tenth field.
    let own = table.lines().skip(1).find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.get(3) != Some(&"0A") || !sockets.contains(*fields.get(9)?) {
            return None;
        }
        let (ip, port) = fields[1].split_once(':')?;
        let ip = Ipv4Addr::from(u32::from_str_radix(ip, 16).ok()?.swap_bytes());
        Some(SocketAddr::from((ip, u16::from_str_radix(port, 16).ok()?)))
    });
    own.or_else(|| {
        let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
        children.split_whitespace().filter_map(|c| c.parse().ok()).find_map(listening_addr)
    })
}

impl HostProcess {
    /// Spawns `command` (from [`kubewasm_run`], or any command whose host gets [`ANY_PORT`]).
    pub fn spawn(mut command: Command) -> Self {
        Self { child: command.spawn().expect("spawning kubewasm"), addr: OnceLock::new() }
    }

    /// Its admin address, once it listens.
    pub fn addr(&self) -> Option<SocketAddr> {
        if let Some(addr) = self.addr.get() {
            return Some(*addr);
        }
        let found = listening_addr(self.child.id())?;
        Some(*self.addr.get_or_init(|| found))
    }

    /// The process id.
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// `GET path` on the admin server: the whole response, or `None` if it is not up.
    pub fn get(&self, path: &str) -> Option<String> {
        let mut stream = TcpStream::connect(self.addr()?).ok()?;
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
