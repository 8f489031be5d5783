//! Helpers shared by the host's integration tests.
#![allow(dead_code)]

pub mod audit;
pub mod examples;
pub mod hostile;
pub mod image;
pub mod process;
pub mod project;
pub mod registry;

use std::path::PathBuf;
use std::sync::Arc;

/// Where `make plugins` puts guest components.
pub fn plugin_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("KUBEWASM_PLUGIN_DIR") {
        return dir.into();
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target"));
    target.join("wasm32-wasip2/plugin")
}

/// A compile cache shared by the tests of this workspace, so each component compiles once.
pub fn test_compile_cache() -> PathBuf {
    plugin_dir().join("../test-compile-cache")
}

/// The bytes of a built plugin component; fails loudly, saying how to build it.
pub fn plugin_wasm(file: &str) -> Arc<[u8]> {
    let path = plugin_dir().join(file);
    match std::fs::read(&path) {
        Ok(bytes) => bytes.into(),
        Err(e) => panic!("cannot read plugin {}: {e}. Build the plugins first: `make plugins`", path.display()),
    }
}

/// [`plugin_wasm`] as the sources hand a component to the host: with its hash.
pub fn plugin_module(file: &str) -> kubewasm_host::hotload::Module {
    kubewasm_host::hotload::Module::hash_blocking(plugin_wasm(file))
}

/// Polls `check` until it returns `Some`, or panics with `what` after `timeout`.
pub async fn eventually<T, F, Fut>(what: &str, timeout: std::time::Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        if tokio::time::Instant::now() > deadline {
            panic!("timed out after {timeout:?} waiting for: {what}");
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// The value of the sample of metric `name` whose labels include every pair in `labels`, from
/// Prometheus text exposition.
pub fn metric_value(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    text.lines().filter(|l| !l.starts_with('#')).find_map(|line| {
        let (series, value) = line.rsplit_once(' ')?;
        let (metric, rest) = series.split_once('{').unwrap_or((series, "}"));
        let matches = metric == name && labels.iter().all(|(k, v)| rest.contains(&format!("{k}=\"{v}\"")));
        matches.then(|| value.parse().ok()).flatten()
    })
}

/// Writes `<name>.wasm` (a copy of a built fixture) and `<name>.yaml` into `dir`.
pub fn install_plugin(dir: &std::path::Path, name: &str, built: &str, config: &str) -> PathBuf {
    let wasm = dir.join(format!("{name}.wasm"));
    std::fs::copy(plugin_dir().join(built), &wasm)
        .unwrap_or_else(|e| panic!("copying {built}: {e}. Run `make plugins`"));
    std::fs::write(dir.join(format!("{name}.yaml")), config).unwrap();
    wasm
}

/// Runs `command`, panicking with its output unless it succeeds; returns stdout.
pub fn run_ok(mut command: std::process::Command) -> String {
    let out = command.output().unwrap_or_else(|e| panic!("{command:?}: {e}"));
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{command:?} failed:\n{stdout}\n{stderr}");
    stdout.into_owned()
}
