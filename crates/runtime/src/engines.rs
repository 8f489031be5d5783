//! Language engines: the components source plugins run on, found in the host's engine directory
//! and compiled once per host, however many plugins run on them.
//!
//! An engine is a file `<language>-<major>.<minor>.<patch>.wasm` (`make engines` builds
//! `python-0.3.0.wasm` and `js-0.3.0.wasm`); a plugin's `engine: python@0.3` takes the newest
//! patch there. The directory is read at each load, so an engine added while the host runs is
//! found; a compiled engine is kept while a loaded plugin runs on it, keyed by its file's path,
//! size and modification time. An engine precompiled in the directory's `compiled/` (the image
//! ships them, `make engines-compiled`) is mapped from there instead of compiled.

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

use super::bindings::PluginPre;
use super::compile_cache;
use super::engine::{EngineFile, Runtime};
use super::snapshot;
use super::source::EngineRef;

/// Why a source plugin cannot have its engine.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The plugin's config names an engine this host does not carry, or a plugin given as
    /// source names none.
    #[error(
        "{} this host's engines{}: {}",
        asked.as_ref().map_or("a plugin given as source names its engine in its config (`engine: python@0.3`); not one of".to_owned(), |a| format!("engine {a} is not one of")),
        dir.as_ref().map_or(" (no engine directory: --engine-dir)".to_owned(), |d| format!(" in {}", d.display())),
        if have.is_empty() { "none".to_owned() } else { have.join(", ") }
    )]
    NoEngine {
        /// The engine named (`python@0.3`); `None`: none was.
        asked: Option<String>,
        /// The engines the host has, with their patch versions (`python@0.3.0`).
        have: Vec<String>,
        /// Where the host looked.
        dir: Option<PathBuf>,
    },
    /// The engine's file could not be read or compiled.
    #[error("cannot use engine {engine}: {cause:#}")]
    Unusable {
        /// The engine named.
        engine: String,
        /// Why (in the message, so not also the error's `source()`).
        cause: wasmtime::Error,
    },
}

/// Every engine in `dir`, as `(engine, patch, file)`, sorted; nothing when `dir` is unreadable.
pub fn engines_in(dir: &Path) -> Vec<(EngineRef, u32, PathBuf)> {
    let mut found: Vec<_> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(|entry| {
            let path = entry.ok()?.path();
            let stem = path.file_name()?.to_str()?.strip_suffix(".wasm")?.to_owned();
            let (language, version) = stem.rsplit_once('-')?;
            let (major_minor, patch) = version.rsplit_once('.')?;
            let engine: EngineRef = format!("{language}@{major_minor}").parse().ok()?;
            Some((engine, patch.parse().ok()?, path))
        })
        .collect();
    found.sort_by(|a, b| (&a.0.language, a.0.major, a.0.minor, a.1).cmp(&(&b.0.language, b.0.major, b.0.minor, b.1)));
    found
}

/// The newest patch of `wanted` in `dir`, or the error that names what `dir` has.
fn find(dir: Option<&Path>, wanted: &EngineRef) -> Result<PathBuf, Error> {
    let have = dir.map(engines_in).unwrap_or_default();
    match have.iter().rev().find(|(engine, _, _)| engine == wanted) {
        Some((_, _, path)) => Ok(path.clone()),
        None => Err(no_engine(dir, &have, Some(wanted))),
    }
}

/// The error of a plugin whose engine (`asked`; `None`: it names none) is not among `have`, the
/// engines in `dir`.
fn no_engine(dir: Option<&Path>, have: &[(EngineRef, u32, PathBuf)], asked: Option<&EngineRef>) -> Error {
    Error::NoEngine {
        asked: asked.map(ToString::to_string),
        have: have.iter().map(|(engine, patch, _)| format!("{engine}.{patch}")).collect(),
        dir: dir.map(Path::to_path_buf),
    }
}

impl Runtime {
    /// The compiled engine `wanted` names: the one a loaded plugin already runs on, or the
    /// engine file's precompiled code beside it, or the file compiled (through the compile
    /// cache) once, however many plugins ask at once.
    pub(crate) async fn engine(&self, wanted: &EngineRef) -> Result<Arc<PluginPre>, Error> {
        let path = find(self.engine_dir.as_deref(), wanted)?;
        let name = wanted.to_string();
        let failed = |cause: wasmtime::Error| Error::Unusable { engine: name.clone(), cause };
        let meta = std::fs::metadata(&path).map_err(|e| failed(e.into()))?;
        let file = EngineFile { path: path.clone(), len: meta.len(), modified: meta.modified().ok() };
        // One compile at a time: N plugins loading at once wait for the first one's engine.
        let _compiling = self.engine_compile.lock().await;
        if let Some(pre) = self.engines.lock().get(&file).and_then(Weak::upgrade) {
            self.compiled_reused.fetch_add(1, Ordering::Relaxed);
            return Ok(pre);
        }
        let runtime = self.clone();
        let pre = tokio::task::spawn_blocking(move || -> wasmtime::Result<PluginPre> {
            let wasm = std::fs::read(&path)?;
            // Instrumented so a source plugin's state after import can be kept and restored
            // (`snapshot.rs`); an engine that cannot be runs as it is, importing each time.
            let wasm = match snapshot::instrument(&wasm) {
                Ok(instrumented) => instrumented,
                Err(e) => {
                    tracing::warn!(engine = %path.display(), "the engine cannot be instrumented for snapshots; its plugins import in every instance: {e:#}");
                    wasm
                }
            };
            // Precompiled beside the engines (the image's), else through the compile cache.
            let sha256 = compile_cache::key(&wasm);
            let shipped = path.parent().and_then(|dir| compile_cache::precompiled(dir, &runtime.engine, &sha256));
            let component = match shipped {
                Some(component) => {
                    tracing::info!(engine = %path.display(), "engine precompiled beside it: nothing compiled");
                    component
                }
                None => runtime.compile(&wasm)?,
            };
            PluginPre::engine(runtime.linker.instantiate_pre(&component)?)
        })
        .await
        .map_err(|e| failed(wasmtime::Error::msg(e.to_string())))?
        .map_err(failed)?;
        let pre = Arc::new(pre);
        self.engines_compiled.fetch_add(1, Ordering::Relaxed);
        let mut engines = self.engines.lock();
        engines.retain(|_, held| held.strong_count() > 0);
        engines.insert(file, Arc::downgrade(&pre));
        Ok(pre)
    }

    /// Why a source plugin whose config names no engine cannot load: what this host has.
    pub(crate) fn no_engine_named(&self) -> Error {
        let dir = self.engine_dir.as_deref();
        no_engine(dir, &dir.map(engines_in).unwrap_or_default(), None)
    }

    /// Engines compiled (or read from the compile cache) by this runtime: one per engine
    /// file, however many source plugins run on it.
    pub fn engines_compiled(&self) -> usize {
        self.engines_compiled.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_newest_patch_of_the_engine_asked_for_is_taken_and_a_missing_one_names_what_there_is() {
        let dir = tempfile::tempdir().unwrap();
        for file in ["python-0.3.0.wasm", "python-0.3.2.wasm", "python-0.4.0.wasm", "notes.txt", "js-0.3.0.wasm"] {
            std::fs::write(dir.path().join(file), b"").unwrap();
        }
        let python = "python@0.3".parse().unwrap();
        assert_eq!(find(Some(dir.path()), &python).unwrap(), dir.path().join("python-0.3.2.wasm"));
        let ruby = "ruby@1.0".parse().unwrap();
        let err = find(Some(dir.path()), &ruby).unwrap_err().to_string();
        assert!(
            err.contains("ruby@1.0") && err.contains("js@0.3.0, python@0.3.0, python@0.3.2, python@0.4.0"),
            "{err}"
        );
        let err = find(None, &python).unwrap_err().to_string();
        assert!(err.contains("python@0.3") && err.contains("--engine-dir"), "{err}");
    }
}
