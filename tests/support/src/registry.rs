//! A real OCI registry for tests: the CNCF distribution registry that `tests/registry/build.sh`
//! builds from Go modules and caches, served over TLS (a CA made here) with htpasswd auth.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair};

use crate::process::Supervised;

/// The distribution version `tests/registry/build.sh` builds by default.
pub const DEFAULT_REGISTRY_VERSION: &str = "3.1.2";
/// The one user of the test registry's htpasswd file.
pub const REGISTRY_USER: &str = "testuser";
/// Its password.
pub const REGISTRY_PASSWORD: &str = "testpassword";
/// bcrypt of [`REGISTRY_PASSWORD`] (distribution accepts only bcrypt; this is the hash the
/// oci-client crate's own registry tests use, so no bcrypt implementation is needed here).
const HTPASSWD: &str = "testuser:$2y$05$8/q2bfRcX74EuxGf0qOcSuhWDQJXrgWiy6Fi73/JM2tKC66qSrLve\n";
/// How long the registry may take to listen.
const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// A running registry; stopped (process group killed) and its storage removed on drop.
#[derive(Debug)]
pub struct Registry {
    binary: PathBuf,
    dir: tempfile::TempDir,
    port: u16,
    ca_pem: String,
    process: Option<Supervised>,
}

impl Registry {
    /// Starts a registry, or `None` (skipped, with a message) when its binary is not built;
    /// in CI (`CI=true`) a missing binary panics instead.
    pub async fn start_or_skip() -> Option<Registry> {
        let binary = binary();
        if !crate::binaries::is_executable(&binary) {
            let message = format!(
                "kubewasm-testenv: no registry binary at {}.\nBuild it once with `make registry` \
                 (or tests/registry/build.sh). Registry tests are SKIPPED locally without it and FAIL when CI=true.",
                binary.display()
            );
            assert!(!crate::binaries::in_ci(), "{message}");
            eprintln!("{message}");
            return None;
        }
        Some(Self::start(binary).await.expect("the test registry starts"))
    }

    async fn start(binary: PathBuf) -> anyhow::Result<Registry> {
        let dir = tempfile::Builder::new().prefix("kubewasm-registry-").tempdir()?;
        let port = crate::etcd::free_port()?;
        let ca_pem = write_tls(dir.path())?;
        std::fs::write(dir.path().join("htpasswd"), HTPASSWD)?;
        let config = format!(
            "version: 0.1\n\
             log: {{level: warn}}\n\
             storage:\n  filesystem: {{rootdirectory: {data}}}\n  delete: {{enabled: true}}\n\
             http:\n  addr: 127.0.0.1:{port}\n  tls: {{certificate: {crt}, key: {key}}}\n\
             auth:\n  htpasswd: {{realm: kubewasm-test, path: {htpasswd}}}\n",
            data = dir.path().join("data").display(),
            crt = dir.path().join("registry.crt").display(),
            key = dir.path().join("registry.key").display(),
            htpasswd = dir.path().join("htpasswd").display(),
        );
        std::fs::write(dir.path().join("config.yml"), config)?;
        let mut registry = Registry { binary, dir, port, ca_pem, process: None };
        registry.resume().await?;
        Ok(registry)
    }

    /// `127.0.0.1:<port>`: the registry part of a reference.
    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The CA that signed the registry's serving certificate (PEM).
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// Stops the registry (its storage stays): requests fail to connect until [`resume`](Self::resume).
    pub fn stop(&mut self) {
        if let Some(process) = self.process.take() {
            process.kill();
        }
    }

    /// Starts it again on the same port and storage; returns once it listens.
    pub async fn resume(&mut self) -> anyhow::Result<()> {
        let (config, log) = (self.dir.path().join("config.yml"), self.dir.path().join("registry.log"));
        let args = ["serve".to_owned(), config.display().to_string()];
        let mut process = Supervised::spawn("registry", &self.binary, &args, &log)?;
        let deadline = Instant::now() + READY_TIMEOUT;
        while tokio::net::TcpStream::connect(("127.0.0.1", self.port)).await.is_err() {
            process.check_running()?;
            anyhow::ensure!(Instant::now() < deadline, "registry not listening after {READY_TIMEOUT:?}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        self.process = Some(process);
        Ok(())
    }

    /// The registry's log so far (for failure messages).
    pub fn log(&self) -> String {
        crate::process::log_tail(&self.dir.path().join("registry.log"))
    }
}

/// Writes a CA and a serving certificate for 127.0.0.1 and localhost; returns the CA's PEM.
fn write_tls(dir: &Path) -> anyhow::Result<String> {
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params.distinguished_name.push(DnType::CommonName, "kubewasm-testenv registry CA");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![rcgen::KeyUsagePurpose::KeyCertSign, rcgen::KeyUsagePurpose::DigitalSignature];
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate()?)?;
    let mut serving = CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])?;
    serving.distinguished_name.push(DnType::CommonName, "registry");
    serving.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let key = KeyPair::generate()?;
    let cert = serving.signed_by(&key, &ca)?;
    std::fs::write(dir.join("registry.crt"), cert.pem()).context("writing the registry certificate")?;
    std::fs::write(dir.join("registry.key"), key.serialize_pem())?;
    std::fs::write(dir.join("ca.crt"), ca.pem())?;
    Ok(ca.pem())
}

/// `$KUBEWASM_REGISTRY_CACHE` or `$XDG_CACHE_HOME/kubewasm/registry` or
/// `~/.cache/kubewasm/registry`, then `$KUBEWASM_REGISTRY_VERSION`, then `registry`: where
/// `tests/registry/build.sh` puts it.
fn binary() -> PathBuf {
    let env = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
    let root = env("KUBEWASM_REGISTRY_CACHE")
        .map(PathBuf::from)
        .or_else(|| env("XDG_CACHE_HOME").map(|d| PathBuf::from(d).join("kubewasm/registry")))
        .or_else(|| env("HOME").map(|h| PathBuf::from(h).join(".cache/kubewasm/registry")))
        .unwrap_or_else(|| PathBuf::from(".cache/kubewasm/registry"));
    let version = std::env::var("KUBEWASM_REGISTRY_VERSION").ok().filter(|v| !v.is_empty());
    root.join(version.as_deref().unwrap_or(DEFAULT_REGISTRY_VERSION)).join("registry")
}
