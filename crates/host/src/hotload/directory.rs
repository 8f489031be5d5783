//! The plugin directory as a source: each `<name>.wasm`, configured by `<name>.yaml` (`.yml`,
//! `.json`) beside it, each `<name>.py` or `<name>.js` (or `<name>/` of several), a plugin given
//! as source whose config names its engine, and each `<name>.yaml` without either that names an
//! OCI module (`module: {oci: …}`, see [`oci`]). Watched with notify; bursts of events (a file
//! being copied in) are debounced, then the whole directory is compared with what serves
//! (level-triggered, so a missed or merged event cannot leave a stale version).

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;
use notify::RecursiveMode;
use tokio_util::sync::CancellationToken;

use super::loaded::{Applied, ApplyError, Candidate, Desired, LoadedPlugins, Origin};
use super::module::Module;
use super::wasmplugin::OciModule;
use crate::plugin::PluginConfig;

mod files;
pub mod oci;
mod source_dir;

use files::{Listing, list};
pub use files::{PluginFile, config_beside, plugin_files, read_plugin};

/// Reads a plugin's config file (default config when there is none).
pub fn read_config(file: &PluginFile) -> anyhow::Result<PluginConfig> {
    read_config_and_module(file).map(|(config, _)| config)
}

/// Reads a plugin's config file and the OCI module it names, if any.
fn read_config_and_module(file: &PluginFile) -> anyhow::Result<(PluginConfig, Option<OciModule>)> {
    let text = match &file.config {
        Some(path) => Some(std::fs::read(path).with_context(|| format!("reading {}", path.display()))?),
        None => None,
    };
    parse_config(file, text.as_deref())
}

/// Parses `text`, the bytes of `file`'s config file as they were read (`None`: it has none),
/// into its config and the OCI module it names, if any.
fn parse_config(file: &PluginFile, text: Option<&[u8]>) -> anyhow::Result<(PluginConfig, Option<OciModule>)> {
    let (Some(path), Some(text)) = (&file.config, text) else {
        return Ok((PluginConfig::default(), None));
    };
    let text = std::str::from_utf8(text).with_context(|| format!("reading {}", path.display()))?;
    let (config, module) = oci::parse(text).with_context(|| format!("in {}", path.display()))?;
    if let (Some(wasm), Some(_)) = (&file.wasm, &module) {
        anyhow::bail!("{} names module.oci, but {} is beside it: keep one", path.display(), wasm.display());
    }
    Ok((config, module))
}

/// Loads one plugin file as the directory source does: its component, its config and the
/// canary candidate the config names. What `App::add_plugin` and embedders call; errors name
/// the file.
pub async fn load_file(plugins: &LoadedPlugins, file: &PluginFile) -> anyhow::Result<Applied> {
    let config = read_config(file)?;
    let Some(path) = &file.wasm else {
        anyhow::bail!("plugin {} names an OCI module: only the directory source pulls it", file.name);
    };
    let wasm = Module::hash(read_plugin(path).with_context(|| format!("reading {}", path.display()))?).await;
    let dir = path.parent().unwrap_or(Path::new("."));
    let canary_wasm = match canary_path(dir, file.config.as_ref().map(std::fs::read).transpose()?.as_deref()) {
        Some(path) => {
            let bytes = read_plugin(&path).with_context(|| format!("reading {}", path.display()))?;
            Some(Some(Module::hash(bytes).await))
        }
        None => None,
    };
    let applied = apply_version(plugins, &file.name, wasm, canary_wasm, config).await;
    applied.with_context(|| path.display().to_string())
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
    /// Pulls the OCI modules plugin files name; `None`: such files are refused.
    oci: Option<oci::OciFiles>,
    /// How often a watch also passes on its own ([`RESCAN_INTERVAL`] unless set).
    rescan: Duration,
    /// The source directories (`<name>/`) the last pass listed: what a watch watches below.
    source_dirs: BTreeSet<PathBuf>,
}

/// How often the watcher also rescans on its own, to retry versions that failed for reasons
/// outside the files (and to catch events a watcher can miss, e.g. on network file systems).
pub const RESCAN_INTERVAL: Duration = Duration::from_secs(30);

/// A plugin file's bytes as one pass read them.
struct Read {
    /// The component file (empty for a file naming an OCI module), hashed as it was read.
    wasm: Module,
    /// The canary's component file named by the config, if any (`None` inside when unreadable).
    canary_wasm: Option<Option<Module>>,
    fingerprint: Fingerprint,
}

impl Read {
    /// Whether the config read names an OCI module.
    fn names_module(&self) -> bool {
        let text = self.fingerprint.config.as_deref().and_then(|c| std::str::from_utf8(c).ok());
        text.is_some_and(oci::names_module)
    }
}

/// The canary component file `config` (a config file's bytes) names, in `dir`.
fn canary_path(dir: &Path, config: Option<&[u8]>) -> Option<PathBuf> {
    let text = std::str::from_utf8(config?).ok()?;
    let wasm = oci::parse(text).ok()?.0.canary?.wasm?;
    Some(dir.join(wasm))
}

/// Reads and hashes `file` on a blocking thread (components are 10-20 MB); `None` if a file
/// vanished or could not be read.
async fn read_version(file: PluginFile) -> Option<Read> {
    tokio::task::spawn_blocking(move || {
        // Hashed here, once: the fingerprint and the load share the hash.
        let wasm = Module::hash_blocking(match &file.wasm {
            Some(path) => read_plugin(path).ok()?,
            None => Vec::new(),
        });
        let config = match &file.config {
            Some(path) => Some(std::fs::read(path).ok()?),
            None => None,
        };
        let dir = file.wasm.as_ref().or(file.config.as_ref())?.parent().unwrap_or(Path::new("."));
        let canary_wasm = canary_path(dir, config.as_deref()).map(|p| read_plugin(&p).ok().map(Module::hash_blocking));
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
        let (tried, source_dirs) = (HashMap::new(), BTreeSet::new());
        Self { dir: dir.into(), plugins, tried, oci: None, rescan: RESCAN_INTERVAL, source_dirs }
    }

    /// How often a watch also passes when no file event came (default [`RESCAN_INTERVAL`]).
    #[must_use]
    pub fn rescan_every(mut self, interval: Duration) -> Self {
        self.rescan = interval;
        self
    }

    /// Pull the OCI modules plugin files name through `registries` (their Secrets: the host's
    /// namespace), resolving unpinned tags again every `refresh` unless a file says otherwise.
    #[must_use]
    pub fn oci(mut self, registries: crate::hotload::oci::Registries, refresh: Duration) -> Self {
        self.oci = Some(oci::OciFiles::new(registries, refresh));
        self
    }

    /// One pass: loads new files, swaps changed ones, unloads removed ones. Files whose bytes
    /// were already tried (and failed, or serve) are skipped, so a bad file is reported once;
    /// a file's OCI module is also resolved again when its interval (or retry) is due.
    /// The readiness check `plugin directory` passes once a pass has read the directory and
    /// applied or rejected every file in it; it fails while the directory cannot be read.
    pub async fn sync(&mut self) -> anyhow::Result<Vec<(String, Change)>> {
        let readiness = self.plugins.context().readiness.clone();
        let dir = self.dir.clone();
        let listed = tokio::task::spawn_blocking(move || list(&dir)).await;
        let Listing { files, being_written } = match listed.unwrap_or_else(|e| Err(std::io::Error::other(e))) {
            Ok(listing) => listing,
            Err(e) => {
                readiness.set(READINESS_CHECK, false);
                return Err(e).with_context(|| format!("reading plugin directory {}", self.dir.display()));
            }
        };
        self.source_dirs = files.iter().filter_map(|f| f.wasm.clone().filter(|p| p.is_dir())).collect();
        let mut changes = Vec::new();
        for file in &files {
            // A file can vanish or be half-written between listing and reading: the next
            // event brings another pass. So can a config that named an OCI module when listed
            // and, read now, is being rewritten: it names none until it is written whole.
            let read = read_version(file.clone()).await;
            let Some(Read { wasm, canary_wasm, fingerprint }) =
                read.filter(|r| file.wasm.is_some() || r.names_module())
            else {
                if let Some(oci) = &mut self.oci {
                    oci.postpone(&file.name);
                }
                continue;
            };
            let changed = self.tried.get(&file.name) != Some(&fingerprint);
            let due = file.wasm.is_none() && self.oci.as_ref().is_some_and(|o| o.due(&file.name));
            if !changed && !due {
                continue;
            }
            // The config applied is the one fingerprinted: the bytes this pass read, not a second
            // read that could find the file rewritten.
            let read = parse_config(file, fingerprint.config.as_deref());
            self.tried.insert(file.name.clone(), fingerprint);
            if let (Some(oci), false) = (&mut self.oci, read.as_ref().is_ok_and(|(_, m)| m.is_some())) {
                oci.idle(&file.name);
            }
            let (config, module) = match read {
                Ok(read) => read,
                Err(e) => {
                    // Never reaches the plugins: the one log line of this rejection is here.
                    self.plugins.rejected(&file.name, "InvalidConfig");
                    tracing::error!(plugin = %file.name, error = format!("{e:#}"), "plugin file not applied");
                    changes.push((file.name.clone(), Change::Rejected(e)));
                    continue;
                }
            };
            let (wasm, digest) = match module {
                None => (wasm, None),
                Some(module) => match self.oci_module(file, &module, changed).await {
                    Ok(Some((wasm, digest))) => (wasm, Some(digest)),
                    Ok(None) => continue,
                    Err(e) => {
                        changes.push((file.name.clone(), Change::Rejected(e)));
                        continue;
                    }
                },
            };
            let change = match apply_version(&self.plugins, &file.name, wasm, canary_wasm, config).await {
                Ok(applied) => {
                    if let Some(oci) = &mut self.oci {
                        oci.applied(&file.name, digest);
                    }
                    Change::Applied(applied)
                }
                Err(e) => {
                    if e.is_transient() {
                        // Not the file's fault (the API server is away, a cache did not
                        // sync): the next pass tries the same bytes again.
                        self.tried.remove(&file.name);
                    }
                    if let Some(oci) = &mut self.oci {
                        oci.applied(&file.name, None);
                    }
                    // Logged by the plugins; the file to fix is the config when it is the
                    // config's fault (grants, limits, settings).
                    let blamed = match (&file.config, &file.wasm, e.blames_config()) {
                        (Some(config), _, true) | (Some(config), None, _) => config.display().to_string(),
                        (None, Some(wasm), true) => format!(
                            "{} (absent: create it beside {})",
                            wasm.with_extension("yaml").display(),
                            wasm.display()
                        ),
                        (_, Some(wasm), false) => wasm.display().to_string(),
                        (None, None, _) => file.name.clone(),
                    };
                    Change::Rejected(anyhow::Error::new(e).context(blamed))
                }
            };
            changes.push((file.name.clone(), change));
        }
        // A plugin whose config is being written in place (truncated, not yet written) is not
        // listed, since its config does not name its module yet: it keeps serving, and what
        // this source knows of it stays, until a pass reads the config whole.
        let serving = self.plugins.names(&Origin::Directory).await;
        let mut kept: Vec<&str> = files.iter().map(|f| f.name.as_str()).collect();
        let writing: Vec<&String> =
            serving.iter().filter(|n| !kept.contains(&n.as_str()) && being_written.contains(n.as_str())).collect();
        kept.extend(writing.iter().map(|n| n.as_str()));
        if let Some(oci) = &mut self.oci {
            oci.retain(&kept);
        }
        self.tried.retain(|name, _| kept.contains(&name.as_str()));
        for name in &serving {
            if !kept.contains(&name.as_str()) && self.plugins.remove(name, &Origin::Directory).await {
                changes.push((name.clone(), Change::Removed));
            }
        }
        readiness.set(READINESS_CHECK, true);
        Ok(changes)
    }

    /// The component of `file`'s OCI `module` when it is to be applied, with its digest; `None`
    /// when the digest applied is still the one it names (and the file did not change). A
    /// failure leaves the version serving; it is counted and logged by [`oci::OciFiles`].
    async fn oci_module(
        &mut self,
        file: &PluginFile,
        module: &OciModule,
        changed: bool,
    ) -> anyhow::Result<Option<(Module, String)>> {
        let config = file.config.as_ref().map(|c| c.display().to_string()).unwrap_or_default();
        let Some(oci) = &mut self.oci else {
            self.plugins.rejected(&file.name, "InvalidConfig");
            let e = anyhow::anyhow!("{config} names an OCI module, but this host pulls none for plugin files");
            tracing::error!(plugin = %file.name, error = format!("{e:#}"), "plugin file not applied");
            return Err(e);
        };
        match oci.module(&self.plugins, &file.name, module, changed).await {
            Ok(oci::Outcome::New { wasm, digest }) => Ok(Some((wasm, digest))),
            Ok(oci::Outcome::Same) => Ok(None),
            Err(e) => Err(anyhow::Error::new(e).context(config)),
        }
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
        let mut watch = DirectoryWatch { source: self, debouncer, watched: BTreeSet::new(), events: rx };
        watch.watch_source_dirs();
        Ok(watch)
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
    /// Dropping it stops the watch.
    debouncer: notify_debouncer_full::Debouncer<notify::RecommendedWatcher, notify_debouncer_full::RecommendedCache>,
    /// The source directories (`<name>/`) watched, each with all below it, besides the plugin
    /// directory itself: only those, so a project's `target/` or `node_modules/` is not watched.
    watched: BTreeSet<PathBuf>,
    events: tokio::sync::mpsc::UnboundedReceiver<notify_debouncer_full::DebounceEventResult>,
}

impl DirectoryWatch {
    /// Applies the directory's changes as they come (and on a periodic rescan) until `shutdown`.
    pub async fn run(mut self, shutdown: CancellationToken) -> anyhow::Result<()> {
        let every = self.source.rescan;
        let mut rescan = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        loop {
            // An OCI module due for resolution wakes the watcher before the next rescan.
            let due = self.source.oci.as_ref().and_then(oci::OciFiles::next_due);
            let oci_due = async {
                match due {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            let events = tokio::select! {
                _ = shutdown.cancelled() => return Ok(()),
                _ = rescan.tick() => Some(Ok(Vec::new())),
                () = oci_due => Some(Ok(Vec::new())),
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
            // A source directory new since the last pass may have changed before its watch
            // began: one more pass reads it as it is once watched.
            if self.watch_source_dirs()
                && let Err(e) = self.source.sync().await
            {
                tracing::error!(error = format!("{e:#}"), "plugin directory pass failed");
            }
        }
    }

    /// Watches the source directories the last pass listed (and no longer those gone); whether
    /// one was added.
    fn watch_source_dirs(&mut self) -> bool {
        let now = self.source.source_dirs.clone();
        for gone in self.watched.difference(&now) {
            let _ = self.debouncer.unwatch(gone);
        }
        let mut added = false;
        for dir in now.difference(&self.watched) {
            match self.debouncer.watch(dir, RecursiveMode::Recursive) {
                Ok(()) => added = true,
                Err(e) => {
                    tracing::warn!(dir = %dir.display(), error = %e, "cannot watch a source directory; the rescan reads it")
                }
            }
        }
        self.watched = now;
        added
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
        let file = PluginFile { name: "p".into(), wasm: Some(wasm), config: Some(config) };
        let first = read_version(file.clone()).await.unwrap();
        let canary = first.canary_wasm.as_ref().map(|m| m.as_ref().map(|m| m.bytes().to_vec()));
        assert_eq!(canary, Some(Some(b"one".to_vec())));
        std::fs::write(dir.path().join(".p.canary.wasm"), b"two").unwrap();
        let second = read_version(file).await.unwrap();
        assert!(first.fingerprint != second.fingerprint, "a new candidate is a new version to apply");
        assert_eq!(plugin_files(dir.path()).unwrap().len(), 1, "the hidden candidate is not a plugin of its own");
    }

    #[tokio::test]
    async fn a_pass_applies_the_config_bytes_it_fingerprinted_and_skips_an_oci_config_read_mid_rewrite() {
        let dir = tempfile::tempdir().unwrap();
        let (wasm, config) = (dir.path().join("p.wasm"), dir.path().join("p.yaml"));
        std::fs::write(&wasm, b"wasm").unwrap();
        std::fs::write(&config, "limits: {deadlineMs: 5000}\n").unwrap();
        let file = PluginFile { name: "p".into(), wasm: Some(wasm), config: Some(config.clone()) };
        let read = read_version(file.clone()).await.unwrap();
        std::fs::write(&config, "").unwrap();
        let (applied, _) = parse_config(&file, read.fingerprint.config.as_deref()).unwrap();
        assert_eq!(applied.limits, PluginConfig::from_yaml("limits: {deadlineMs: 5000}\n").unwrap().limits);

        let pulled = dir.path().join("pulled.yaml");
        std::fs::write(&pulled, "module: {oci: {ref: r.example/p:v1}}\n").unwrap();
        let file = PluginFile { name: "pulled".into(), wasm: None, config: Some(pulled.clone()) };
        assert!(read_version(file.clone()).await.unwrap().names_module());
        std::fs::write(&pulled, "").unwrap();
        assert!(!read_version(file).await.unwrap().names_module(), "a pass skips it rather than apply no component");
    }

    #[tokio::test(flavor = "current_thread")]
    async fn reading_and_hashing_a_component_leaves_the_runtime_thread_free() {
        let dir = tempfile::tempdir().unwrap();
        let wasm = dir.path().join("big.wasm");
        std::fs::write(&wasm, vec![7u8; 64 << 20]).unwrap();
        let file = PluginFile { name: "big".into(), wasm: Some(wasm), config: None };
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

    #[tokio::test(flavor = "current_thread")]
    async fn a_source_plugins_canary_file_is_read_as_a_source_too() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("defaults.py"), "x = 1\n").unwrap();
        std::fs::write(dir.path().join("next.py"), "x = 2\n").unwrap();
        std::fs::write(dir.path().join("defaults.yaml"), "engine: python@0.3\ncanary: {wasm: next.py}\n").unwrap();
        let [file] = plugin_files(dir.path()).unwrap().try_into().unwrap();
        let read = read_version(file).await.expect("the files are there");
        let canary = read.canary_wasm.flatten().expect("the canary file is read");
        let files = crate::plugin::source::unbundle(canary.bytes()).expect("a bundle, as the plugin's own file");
        assert_eq!((files[0].path.as_str(), files[0].contents.as_slice()), ("next.py", b"x = 2\n".as_slice()));
    }
}
