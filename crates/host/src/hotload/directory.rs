//! The plugin directory as a source: each `<name>.wasm`, configured by `<name>.yaml` (`.yml`,
//! `.json`) beside it. Watched with notify; bursts of events (a file being copied in) are
//! debounced, then the whole directory is compared with what serves (level-triggered, so a
//! missed or merged event cannot leave a stale version).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;
use notify::RecursiveMode;
use tokio_util::sync::CancellationToken;

use super::loaded::{Applied, ApplyError, Candidate, Desired, LoadedPlugins, Origin};
use super::module::Module;
use crate::plugin::PluginConfig;

/// A plugin file found in the plugin directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PluginFile {
    /// Plugin name: the file name without `.wasm`.
    pub name: String,
    /// The component.
    pub wasm: PathBuf,
    /// Its config file, if there is one (`<name>.yaml`, `.yml` or `.json`).
    pub config: Option<PathBuf>,
}

/// Every `*.wasm` in `dir`, sorted by name, with its config file. Hidden files (`.x.wasm`,
/// editors' and `kubectl cp`'s temporaries) are skipped.
pub fn plugin_files(dir: &Path) -> std::io::Result<Vec<PluginFile>> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let hidden = path.file_name().is_some_and(|n| n.to_string_lossy().starts_with('.'));
        if path.extension().is_some_and(|e| e == "wasm") && !hidden && path.is_file() {
            let name = path.file_stem().unwrap_or_default().to_string_lossy().into_owned();
            let config = ["yaml", "yml", "json"].iter().map(|ext| path.with_extension(ext)).find(|p| p.is_file());
            found.push(PluginFile { name, wasm: path, config });
        }
    }
    found.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(found)
}

/// Reads a plugin's config file (default config when there is none).
pub fn read_config(file: &PluginFile) -> anyhow::Result<PluginConfig> {
    match &file.config {
        Some(path) => {
            let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
            PluginConfig::from_yaml(&text).with_context(|| format!("in {}", path.display()))
        }
        None => Ok(PluginConfig::default()),
    }
}

/// Loads one plugin file as the directory source does: its component, its config and the
/// canary candidate the config names. What `App::add_plugin` and embedders call; errors name
/// the file.
pub async fn load_file(plugins: &LoadedPlugins, file: &PluginFile) -> anyhow::Result<Applied> {
    let config = read_config(file)?;
    let wasm =
        Module::hash(std::fs::read(&file.wasm).with_context(|| format!("reading {}", file.wasm.display()))?).await;
    let dir = file.wasm.parent().unwrap_or(Path::new("."));
    let canary_wasm = match canary_path(dir, file.config.as_ref().map(std::fs::read).transpose()?.as_deref()) {
        Some(path) => {
            let bytes = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
            Some(Some(Module::hash(bytes).await))
        }
        None => None,
    };
    let applied = apply_version(plugins, &file.name, wasm, canary_wasm, config).await;
    applied.with_context(|| file.wasm.display().to_string())
}

/// The one path from a plugin file's bytes to a load: applies the version and starts (or
/// stops) the canary candidate its config names. `canary_wasm`: `None` when the canary runs
/// the same component, `Some(None)` when its file could not be read.
async fn apply_version(
    plugins: &LoadedPlugins,
    name: &str,
    wasm: Module,
    canary_wasm: Option<Option<Module>>,
    mut config: PluginConfig,
) -> Result<Applied, ApplyError> {
    let canary = config.canary.take();
    let candidate = canary.map(|c| {
        let wasm = match canary_wasm {
            Some(module) => module.unwrap_or_else(|| Module::hash_blocking(Vec::new())),
            None => wasm.clone(),
        };
        let settings = c.settings.or_else(|| config.settings.clone());
        Candidate { wasm, config: PluginConfig { settings, ..config.clone() } }
    });
    let desired = Desired { name: name.to_owned(), origin: Origin::Directory, wasm, config };
    let applied = plugins.apply(desired).await;
    if let Err(e) = plugins.set_canary(name, &Origin::Directory, candidate).await {
        tracing::error!(plugin = %name, error = format!("{e:#}"), "canary candidate not running");
    }
    applied
}

/// Name of the directory source's readiness check.
pub const READINESS_CHECK: &str = "plugin directory";

/// The bytes a version is made of; a pass skips a plugin whose bytes it already tried.
#[derive(Clone, PartialEq, Eq)]
struct Fingerprint {
    wasm_sha256: String,
    config: Option<Vec<u8>>,
    /// The sha256 of the canary's component file, if the config names one.
    canary_sha256: Option<String>,
}

/// What one pass did to one plugin.
#[derive(Debug)]
pub enum Change {
    /// Applied (loaded, swapped, replaced, or unchanged).
    Applied(Applied),
    /// Rejected; the previous version, if any, keeps serving.
    Rejected(anyhow::Error),
    /// Its file is gone; it was unloaded.
    Removed,
}

/// Keeps the plugins of one directory serving as its files say.
pub struct DirectorySource {
    dir: PathBuf,
    plugins: LoadedPlugins,
    tried: HashMap<String, Fingerprint>,
}

/// How often the watcher also rescans on its own, to retry versions that failed for reasons
/// outside the files (and to catch events a watcher can miss, e.g. on network file systems).
pub const RESCAN_INTERVAL: Duration = Duration::from_secs(30);

/// A plugin file's bytes as one pass read them.
struct Read {
    wasm: Module,
    /// The canary's component file named by the config, if any (`None` inside when unreadable).
    canary_wasm: Option<Option<Module>>,
    fingerprint: Fingerprint,
}

/// The canary component file `config` (a config file's bytes) names, in `dir`.
fn canary_path(dir: &Path, config: Option<&[u8]>) -> Option<PathBuf> {
    let text = std::str::from_utf8(config?).ok()?;
    let wasm = PluginConfig::from_yaml(text).ok()?.canary?.wasm?;
    Some(dir.join(wasm))
}

/// Reads and hashes `file` on a blocking thread (components are 10-20 MB); `None` if a file
/// vanished or could not be read.
async fn read_version(file: PluginFile) -> Option<Read> {
    tokio::task::spawn_blocking(move || {
        // Hashed here, once: the fingerprint and the load share the hash.
        let wasm = Module::hash_blocking(std::fs::read(&file.wasm).ok()?);
        let config = match &file.config {
            Some(path) => Some(std::fs::read(path).ok()?),
            None => None,
        };
        let dir = file.wasm.parent().unwrap_or(Path::new("."));
        let canary_wasm = canary_path(dir, config.as_deref()).map(|p| std::fs::read(p).ok().map(Module::hash_blocking));
        let canary_sha256 = canary_wasm.as_ref().map(|w| w.as_ref().map(|m| m.sha256().to_owned()).unwrap_or_default());
        let fingerprint = Fingerprint { wasm_sha256: wasm.sha256().to_owned(), config, canary_sha256 };
        Some(Read { wasm, canary_wasm, fingerprint })
    })
    .await
    .ok()
    .flatten()
}

impl DirectorySource {
    /// A source for `dir`, applying through `plugins`. Its readiness check `plugin directory`
    /// fails from here until the first [`sync`](Self::sync) is over.
    pub fn new(dir: impl Into<PathBuf>, plugins: LoadedPlugins) -> Self {
        plugins.context().readiness.set(READINESS_CHECK, false);
        Self { dir: dir.into(), plugins, tried: HashMap::new() }
    }

    /// One pass: loads new files, swaps changed ones, unloads removed ones. Files whose bytes
    /// were already tried (and failed, or serve) are skipped, so a bad file is reported once.
    /// The readiness check `plugin directory` passes once a pass has read the directory and
    /// applied or rejected every file in it; it fails while the directory cannot be read.
    pub async fn sync(&mut self) -> anyhow::Result<Vec<(String, Change)>> {
        let readiness = self.plugins.context().readiness.clone();
        let dir = self.dir.clone();
        let listed = tokio::task::spawn_blocking(move || plugin_files(&dir)).await;
        let files = match listed.unwrap_or_else(|e| Err(std::io::Error::other(e))) {
            Ok(files) => files,
            Err(e) => {
                readiness.set(READINESS_CHECK, false);
                return Err(e).with_context(|| format!("reading plugin directory {}", self.dir.display()));
            }
        };
        let mut changes = Vec::new();
        for file in &files {
            // A file can vanish or be half-written between listing and reading: the next
            // event brings another pass.
            let Some(Read { wasm, canary_wasm, fingerprint }) = read_version(file.clone()).await else { continue };
            if self.tried.get(&file.name) == Some(&fingerprint) {
                continue;
            }
            self.tried.insert(file.name.clone(), fingerprint);
            let change = match read_config(file) {
                Err(e) => {
                    // Never reaches the plugins: the one log line of this rejection is here.
                    self.plugins.rejected(&file.name, "InvalidConfig");
                    tracing::error!(plugin = %file.name, error = format!("{e:#}"), "plugin file not applied");
                    Change::Rejected(e)
                }
                Ok(config) => {
                    match apply_version(&self.plugins, &file.name, wasm, canary_wasm, config).await {
                        Ok(applied) => Change::Applied(applied),
                        Err(e) => {
                            if e.is_transient() {
                                // Not the file's fault (the API server is away, a cache did
                                // not sync): the next pass tries the same bytes again.
                                self.tried.remove(&file.name);
                            }
                            // Logged by the plugins; the file to fix is the config when it
                            // is the config's fault (grants, limits, settings).
                            let blamed = match (&file.config, e.blames_config()) {
                                (Some(config), true) => config.display().to_string(),
                                (None, true) => format!(
                                    "{} (absent: create it beside {})",
                                    file.wasm.with_extension("yaml").display(),
                                    file.wasm.display()
                                ),
                                (_, false) => file.wasm.display().to_string(),
                            };
                            Change::Rejected(anyhow::Error::new(e).context(blamed))
                        }
                    }
                }
            };
            changes.push((file.name.clone(), change));
        }
        self.tried.retain(|name, _| files.iter().any(|f| &f.name == name));
        for name in self.plugins.names(&Origin::Directory).await {
            if !files.iter().any(|f| f.name == name) && self.plugins.remove(&name, &Origin::Directory).await {
                changes.push((name, Change::Removed));
            }
        }
        readiness.set(READINESS_CHECK, true);
        Ok(changes)
    }

    /// Starts watching the directory: when this returns the watch is in place, so a file
    /// written from here on is seen. [`DirectoryWatch::run`] then applies the changes.
    pub fn start_watch(self, debounce: Duration) -> anyhow::Result<DirectoryWatch> {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let mut debouncer = notify_debouncer_full::new_debouncer(debounce, None, move |result| {
            let _ = tx.send(result);
        })
        .context("starting the plugin directory watcher")?;
        debouncer
            .watch(&self.dir, RecursiveMode::NonRecursive)
            .with_context(|| format!("watching {}", self.dir.display()))?;
        tracing::info!(dir = %self.dir.display(), ?debounce, "watching the plugin directory");
        Ok(DirectoryWatch { source: self, _debouncer: debouncer, events: rx })
    }

    /// Watches the directory until `shutdown`, running a pass after each burst of changes has
    /// been quiet for `debounce`. Call [`sync`](Self::sync) first for the initial state.
    pub async fn watch(self, debounce: Duration, shutdown: CancellationToken) -> anyhow::Result<()> {
        self.start_watch(debounce)?.run(shutdown).await
    }
}

/// A watch on the plugin directory, in place since [`DirectorySource::start_watch`] returned.
pub struct DirectoryWatch {
    source: DirectorySource,
    /// Kept alive: dropping it stops the watch.
    _debouncer: notify_debouncer_full::Debouncer<notify::RecommendedWatcher, notify_debouncer_full::RecommendedCache>,
    events: tokio::sync::mpsc::UnboundedReceiver<notify_debouncer_full::DebounceEventResult>,
}

impl DirectoryWatch {
    /// Applies the directory's changes as they come (and on a periodic rescan) until `shutdown`.
    pub async fn run(mut self, shutdown: CancellationToken) -> anyhow::Result<()> {
        let mut rescan = tokio::time::interval_at(tokio::time::Instant::now() + RESCAN_INTERVAL, RESCAN_INTERVAL);
        loop {
            let events = tokio::select! {
                _ = shutdown.cancelled() => return Ok(()),
                _ = rescan.tick() => Some(Ok(Vec::new())),
                events = self.events.recv() => events,
            };
            match events {
                None => return Ok(()),
                Some(Err(errors)) => tracing::warn!(?errors, "plugin directory watch errors; rescanning"),
                Some(Ok(_)) => {}
            }
            while self.events.try_recv().is_ok() {}
            if let Err(e) = self.source.sync().await {
                tracing::error!(error = format!("{e:#}"), "plugin directory pass failed");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[tokio::test]
    async fn a_canary_component_named_by_the_config_is_part_of_the_version() {
        let dir = tempfile::tempdir().unwrap();
        let (wasm, config) = (dir.path().join("p.wasm"), dir.path().join("p.yaml"));
        std::fs::write(&wasm, b"serving").unwrap();
        std::fs::write(&config, "canary: {wasm: .p.canary.wasm}\n").unwrap();
        std::fs::write(dir.path().join(".p.canary.wasm"), b"one").unwrap();
        let file = PluginFile { name: "p".into(), wasm, config: Some(config) };
        let first = read_version(file.clone()).await.unwrap();
        let canary = first.canary_wasm.as_ref().map(|m| m.as_ref().map(|m| m.bytes().to_vec()));
        assert_eq!(canary, Some(Some(b"one".to_vec())));
        std::fs::write(dir.path().join(".p.canary.wasm"), b"two").unwrap();
        let second = read_version(file).await.unwrap();
        assert!(first.fingerprint != second.fingerprint, "a new candidate is a new version to apply");
        assert_eq!(plugin_files(dir.path()).unwrap().len(), 1, "the hidden candidate is not a plugin of its own");
    }

    #[tokio::test(flavor = "current_thread")]
    async fn reading_and_hashing_a_component_leaves_the_runtime_thread_free() {
        let dir = tempfile::tempdir().unwrap();
        let wasm = dir.path().join("big.wasm");
        std::fs::write(&wasm, vec![7u8; 64 << 20]).unwrap();
        let file = PluginFile { name: "big".into(), wasm, config: None };
        let ticks = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let ticker = tokio::spawn({
            let ticks = ticks.clone();
            async move {
                loop {
                    ticks.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    tokio::task::yield_now().await;
                }
            }
        });
        let before = ticks.load(std::sync::atomic::Ordering::Relaxed);
        let read = read_version(file).await.expect("the file is there");
        let during = ticks.load(std::sync::atomic::Ordering::Relaxed) - before;
        ticker.abort();
        assert_eq!(read.wasm.bytes().len(), 64 << 20);
        assert_eq!(read.fingerprint.wasm_sha256, crate::plugin::sha256_hex(read.wasm.bytes()));
        assert_eq!(read.wasm.sha256(), read.fingerprint.wasm_sha256, "the load takes the fingerprint's hash");
        assert!(read.canary_wasm.is_none(), "no config names a canary");
        assert!(during > 0, "the only runtime thread ran nothing else while 64 MiB were read and hashed");
    }
}
