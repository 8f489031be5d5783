//! The compile cache: each compiled component one file in wasmtime's precompiled format, mapped
//! when loaded rather than read, so the pages of its code that no plugin runs stay on disk.
//!
//! wasmtime's own cache keeps entries compressed and loads one by decompressing it into memory:
//! every byte of the compiled code becomes resident, anonymous memory of the host for as long as
//! the component is loaded (36 MB for the Python engine, most of it an interpreter's code a
//! plugin never calls). A file loaded with [`Component::deserialize_file`] is mapped instead: a
//! page is read in when it first runs, stays clean, and the kernel can drop it under pressure.
//! The engine's linear-memory image is mapped from the same file too.
//!
//! A file is named by the component's sha256 and the engine's compatibility hash, written under a
//! temporary name and renamed into place (a reader never sees half of one), and never changed
//! after. Loading one trusts the directory as wasmtime's cache did: only the host writes there.
//! The directory is kept under a size limit, least recently loaded first. No crate keeps mapped
//! wasmtime artifacts with a size limit, so this is hand-written.

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::SystemTime;

use sha2::{Digest as _, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;

/// Largest total size of the compiled files kept, in bytes, before the least recently loaded are
/// deleted. Files are kept uncompressed, about three times the size of wasmtime's compressed
/// entries, whose cache kept 512 MiB of them; a Python or JavaScript component or engine is
/// 25–38 MB. The deployments' `emptyDir` is sized above it, with room for pulled modules. 1 GiB.
pub const DEFAULT_SIZE_LIMIT: u64 = 1 << 30;

/// The compiled files' extension: wasmtime's, as `wasmtime compile` writes them.
const EXTENSION: &str = "cwasm";

/// How a file being written starts, before it is renamed into place.
const WRITING: &str = ".writing-";

/// Age past which a file being written was left by a process that died writing it (a compile
/// child killed for its memory, say), and is deleted. A file is written after its compile, in
/// one go. 10 minutes.
const ABANDONED_AFTER: std::time::Duration = std::time::Duration::from_secs(600);

/// The directories of a compile cache before this one (`wasmtime` held wasmtime's cache,
/// `kubewasm-compiled` the compile child's markers).
const BEFORE: [&str; 2] = ["wasmtime", "kubewasm-compiled"];

/// The compiled components in a directory, for one engine.
#[derive(Debug)]
pub(crate) struct CompileCache {
    dir: PathBuf,
    engine_hash: String,
    size_limit: u64,
    hits: AtomicUsize,
    misses: AtomicUsize,
}

impl CompileCache {
    /// The cache in `cache_dir` for `engine`, the directory created if missing. What a host
    /// before this cache left there (wasmtime's cache and the compile child's markers) is
    /// deleted: nothing reads it any more.
    pub(crate) fn new(cache_dir: &Path, engine: &Engine, size_limit: u64) -> std::io::Result<Self> {
        for before in BEFORE {
            let _ = std::fs::remove_dir_all(cache_dir.join(before));
        }
        let dir = compiled_dir(cache_dir);
        std::fs::create_dir_all(&dir)?;
        let engine_hash = engine_hash(engine);
        Ok(Self { dir, engine_hash, size_limit, hits: AtomicUsize::new(0), misses: AtomicUsize::new(0) })
    }

    /// The component with this sha256, mapped from its file, if the cache holds it for this
    /// engine: a hit. A file wasmtime refuses (another wasmtime, or not one of its files) is
    /// deleted, to be compiled again.
    pub(crate) fn load(&self, engine: &Engine, sha256: &str) -> Option<Component> {
        let component = self.open(engine, sha256)?;
        self.hits.fetch_add(1, Ordering::Relaxed);
        Some(component)
    }

    /// [`load`](Self::load) of what this process just compiled: not a hit.
    pub(crate) fn load_compiled(&self, engine: &Engine, sha256: &str) -> Option<Component> {
        self.open(engine, sha256)
    }

    fn open(&self, engine: &Engine, sha256: &str) -> Option<Component> {
        let path = self.path(sha256);
        if !path.exists() {
            return None;
        }
        match map(engine, &path) {
            Ok(component) => {
                // Its modification time says when it was last loaded, for `prune`.
                if let Ok(file) = std::fs::File::options().append(true).open(&path) {
                    let _ = file.set_modified(SystemTime::now());
                }
                Some(component)
            }
            Err(error) => {
                tracing::warn!(path = %path.display(), error = %format!("{error:#}"), "compiled file not loadable: compiling again");
                let _ = std::fs::remove_file(&path);
                None
            }
        }
    }

    /// Compiles `wasm`, whose sha256 this is, into the cache ([`store`](Self::store)).
    pub(crate) fn compile(&self, engine: &Engine, wasm: &[u8], sha256: &str) -> wasmtime::Result<()> {
        let compiled = engine.precompile_component(wasm)?;
        self.store(sha256, &compiled).map_err(|e| wasmtime::Error::msg(e.to_string()))
    }

    /// Keeps `compiled` (what [`Engine::precompile_component`] made of the component with this
    /// sha256) in the cache, then keeps the cache under its size limit.
    pub(crate) fn store(&self, sha256: &str, compiled: &[u8]) -> std::io::Result<()> {
        self.misses.fetch_add(1, Ordering::Relaxed);
        let path = self.path(sha256);
        let written = tempfile::Builder::new().prefix(WRITING).tempfile_in(&self.dir).and_then(|mut file| {
            std::io::Write::write_all(&mut file, compiled)?;
            file.persist(&path).map_err(|e| e.error)?;
            Ok(())
        });
        written.map_err(|e| std::io::Error::new(e.kind(), format!("cannot write {}: {e}", path.display())))?;
        self.prune(&path);
        Ok(())
    }

    /// Components loaded from the cache and compiled into it by this process.
    pub(crate) fn stats(&self) -> (usize, usize) {
        (self.hits.load(Ordering::Relaxed), self.misses.load(Ordering::Relaxed))
    }

    fn path(&self, sha256: &str) -> PathBuf {
        self.dir.join(format!("{sha256}-{}.{EXTENSION}", self.engine_hash))
    }

    /// Deletes the least recently loaded files, never `kept`, until the rest fit the size limit,
    /// and files abandoned while being written. A file a runtime has mapped stays mapped after it
    /// is deleted.
    fn prune(&self, kept: &Path) {
        let Ok(entries) = std::fs::read_dir(&self.dir) else { return };
        let mut files: Vec<(SystemTime, u64, PathBuf)> = Vec::new();
        for entry in entries.flatten() {
            let (path, Ok(meta)) = (entry.path(), entry.metadata()) else { continue };
            let modified = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
            if entry.file_name().to_string_lossy().starts_with(WRITING) {
                if modified.elapsed().is_ok_and(|age| age > ABANDONED_AFTER) {
                    let _ = std::fs::remove_file(&path);
                }
            } else if path.extension().is_some_and(|x| x == EXTENSION) {
                files.push((modified, meta.len(), path));
            }
        }
        let mut total: u64 = files.iter().map(|(_, len, _)| len).sum();
        files.sort();
        for (_, len, path) in files {
            if total <= self.size_limit {
                break;
            }
            if path != kept && std::fs::remove_file(&path).is_ok() {
                total -= len;
            }
        }
    }
}

/// The component with this sha256 precompiled in `dir/compiled` (`<sha256>.cwasm`), shipped
/// read-only beside the engines (the image's, `make engines-compiled`), if `engine` can run it:
/// read, never written, touched or deleted.
///
/// Unlike the cache's, these files are not named by the engine's compatibility hash: that hash
/// covers the binary's whole target triple, and the image's static (musl) binary runs what the
/// tests' (glibc) binary compiled. Whether the code fits this engine is wasmtime's check on
/// loading a precompiled file (its version, architecture and OS, compiler flags and CPU features,
/// memory settings and wasm features): a file that does not fit is left, and the engine compiled.
pub(crate) fn precompiled(dir: &Path, engine: &Engine, sha256: &str) -> Option<Component> {
    let path = compiled_dir(dir).join(format!("{sha256}.{EXTENSION}"));
    if !path.exists() {
        return None;
    }
    match map(engine, &path) {
        Ok(component) => Some(component),
        Err(error) => {
            tracing::info!(path = %path.display(), error = %format!("{error:#}"), "precompiled file not for this host: compiling");
            None
        }
    }
}

/// The compiled component in the file at `path`, mapped.
#[allow(unsafe_code)]
fn map(engine: &Engine, path: &Path) -> wasmtime::Result<Component> {
    // SAFETY: the file is one a host wrote into a directory only it (or, for precompiled
    // engines, the image's build) writes, complete (renamed into place) and never changed
    // after: what `deserialize_file` and `deserialize` ask of it.
    unsafe { Component::deserialize_file(engine, path) }.or_else(|mapping| {
        // A file system mounted `noexec` refuses to map code: read the file into memory.
        let bytes = std::fs::read(path).map_err(|_| mapping)?;
        let component = unsafe { Component::deserialize(engine, &bytes) }?;
        tracing::debug!(path = %path.display(), "compiled file read into memory: it cannot be mapped as code");
        Ok(component)
    })
}

/// What a component's file is named by: the sha256 of its bytes, lowercase hex.
pub(crate) fn key(wasm: &[u8]) -> String {
    hex::encode(Sha256::digest(wasm))
}

/// The directory of compiled files inside a compile cache directory.
fn compiled_dir(cache_dir: &Path) -> PathBuf {
    cache_dir.join("compiled")
}

/// wasmtime's compatibility hash of an engine (what decides whether compiled code fits it), as
/// 16 hex digits of its sha256.
fn engine_hash(engine: &Engine) -> String {
    struct Sha(Sha256);
    impl Hasher for Sha {
        fn write(&mut self, bytes: &[u8]) {
            self.0.update(bytes);
        }
        fn finish(&self) -> u64 {
            0
        }
    }
    let mut sha = Sha(Sha256::new());
    engine.precompile_compatibility_hash().hash(&mut sha);
    hex::encode(&sha.0.finalize()[..8])
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn engine(strategy: wasmtime::Strategy) -> Engine {
        Engine::new(wasmtime::Config::new().wasm_component_model(true).strategy(strategy)).unwrap()
    }

    /// A Cranelift engine and the cache of `dir` for it, at the default size limit.
    fn opened(dir: &Path) -> (Engine, CompileCache) {
        let engine = engine(wasmtime::Strategy::Cranelift);
        let cache = CompileCache::new(dir, &engine, DEFAULT_SIZE_LIMIT).unwrap();
        (engine, cache)
    }

    /// A component with nothing in it (its header), and its sha256.
    fn empty_component() -> (Vec<u8>, String) {
        let wasm = b"\0asm\x0d\0\x01\0".to_vec();
        let sha = key(&wasm);
        (wasm, sha)
    }

    #[test]
    fn a_component_compiled_into_the_cache_loads_from_its_file_in_another_cache_on_the_directory() {
        let dir = tempfile::tempdir().unwrap();
        let (engine, first) = opened(dir.path());
        let (wasm, sha) = empty_component();
        assert!(first.load(&engine, &sha).is_none(), "nothing compiled yet");
        first.compile(&engine, &wasm, &sha).unwrap();
        assert_eq!(first.stats(), (0, 1));

        let second = CompileCache::new(dir.path(), &engine, DEFAULT_SIZE_LIMIT).unwrap();
        assert!(second.load(&engine, &sha).is_some());
        assert_eq!(second.stats(), (1, 0));
    }

    #[test]
    fn a_loaded_component_is_mapped_from_its_file_not_copied_into_memory() {
        let dir = tempfile::tempdir().unwrap();
        let (engine, cache) = opened(dir.path());
        let (wasm, sha) = empty_component();
        cache.compile(&engine, &wasm, &sha).unwrap();
        let path = cache.path(&sha).display().to_string();
        let mapped = || std::fs::read_to_string("/proc/self/maps").unwrap().lines().any(|l| l.ends_with(&path));
        assert!(!mapped(), "mapped before it is loaded");
        let component = cache.load(&engine, &sha).unwrap();
        assert!(mapped(), "{path} is not among this process's mappings");
        drop(component);
    }

    #[test]
    fn a_file_wasmtime_refuses_is_deleted_and_not_loaded() {
        let dir = tempfile::tempdir().unwrap();
        let (engine, cache) = opened(dir.path());
        let (_, sha) = empty_component();
        std::fs::write(cache.path(&sha), b"not an ELF file").unwrap();
        assert!(cache.load(&engine, &sha).is_none());
        assert!(!cache.path(&sha).exists(), "the refused file is still there");
        assert_eq!(cache.stats(), (0, 0));
    }

    #[test]
    fn a_precompiled_directory_is_read_as_it_is_and_a_file_wasmtime_refuses_there_is_left() {
        let dir = tempfile::tempdir().unwrap();
        let (cranelift, cache) = opened(dir.path());
        let (wasm, sha) = empty_component();
        assert!(precompiled(dir.path(), &cranelift, &sha).is_none(), "nothing precompiled yet");
        cache.compile(&cranelift, &wasm, &sha).unwrap();
        let path = dir.path().join("compiled").join(format!("{sha}.{EXTENSION}"));
        std::fs::rename(cache.path(&sha), &path).unwrap();
        let old = std::time::SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        std::fs::File::options().append(true).open(&path).unwrap().set_modified(old).unwrap();
        assert!(precompiled(dir.path(), &cranelift, &sha).is_some());
        assert_eq!(std::fs::metadata(&path).unwrap().modified().unwrap(), old, "a read-only directory is not touched");
        let winch = engine(wasmtime::Strategy::Winch);
        assert!(precompiled(dir.path(), &winch, &sha).is_none(), "Cranelift's code for Winch");

        std::fs::write(&path, b"not an ELF file").unwrap();
        assert!(precompiled(dir.path(), &cranelift, &sha).is_none());
        assert!(path.exists(), "a shipped file is not the host's to delete");
    }

    #[test]
    fn over_its_size_limit_the_cache_deletes_the_least_recently_loaded_files_first() {
        let dir = tempfile::tempdir().unwrap();
        let (engine, cache) = opened(dir.path());
        let old = cache.path("old");
        std::fs::write(&old, [0; 10]).unwrap();
        let recent = cache.path("recent");
        std::fs::write(&recent, [0; 10]).unwrap();
        let now = SystemTime::now();
        std::fs::File::options().append(true).open(&old).unwrap().set_modified(now - Duration::from_secs(60)).unwrap();
        std::fs::File::options().append(true).open(&recent).unwrap().set_modified(now).unwrap();
        let other = dir.path().join("compiled/not-a-compiled-file");
        std::fs::write(&other, [0; 10]).unwrap();

        let cache = CompileCache { size_limit: 15, ..cache };
        let (wasm, sha) = empty_component();
        cache.compile(&engine, &wasm, &sha).unwrap();
        assert!(cache.path(&sha).exists(), "the file just compiled is kept, whatever its size");
        assert!(!old.exists(), "the least recently loaded file is kept");
        assert!(other.exists(), "a file that is not the cache's is deleted");
        let left = std::fs::metadata(&recent).is_ok();
        let size = std::fs::metadata(cache.path(&sha)).unwrap().len();
        assert_eq!(left, size + 10 <= 15, "the recent file is deleted only if the two do not fit");
    }

    #[test]
    fn a_file_left_half_written_is_deleted_once_it_is_old_and_not_before() {
        let dir = tempfile::tempdir().unwrap();
        let (engine, cache) = opened(dir.path());
        let abandoned = dir.path().join(format!("compiled/{WRITING}abandoned"));
        let writing = dir.path().join(format!("compiled/{WRITING}now"));
        std::fs::write(&abandoned, [0; 10]).unwrap();
        std::fs::write(&writing, [0; 10]).unwrap();
        let old = SystemTime::now() - ABANDONED_AFTER - Duration::from_secs(1);
        std::fs::File::options().append(true).open(&abandoned).unwrap().set_modified(old).unwrap();

        let (wasm, sha) = empty_component();
        cache.compile(&engine, &wasm, &sha).unwrap();
        assert!(!abandoned.exists(), "a file abandoned while being written is kept");
        assert!(writing.exists(), "a file another process is writing now is deleted");
        let left: Vec<_> =
            std::fs::read_dir(dir.path().join("compiled")).unwrap().flatten().map(|e| e.file_name()).collect();
        assert_eq!(left.len(), 2, "the compiled file and the one being written: {left:?}");
    }

    #[test]
    fn what_the_cache_before_it_left_is_deleted_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        for path in ["wasmtime/modules/wasmtime-48.0.8/entry", "kubewasm-compiled/marker", "oci/manifests/m"] {
            let path = dir.path().join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, b"x").unwrap();
        }
        opened(dir.path());
        assert!(!dir.path().join("wasmtime").exists() && !dir.path().join("kubewasm-compiled").exists());
        assert!(dir.path().join("oci/manifests/m").exists(), "pulled modules share the directory");
    }

    #[test]
    fn engines_of_other_settings_have_other_files() {
        let dir = tempfile::tempdir().unwrap();
        let plain = engine(wasmtime::Strategy::Cranelift);
        let winch = engine(wasmtime::Strategy::Winch);
        let a = CompileCache::new(dir.path(), &plain, DEFAULT_SIZE_LIMIT).unwrap();
        let b = CompileCache::new(dir.path(), &winch, DEFAULT_SIZE_LIMIT).unwrap();
        assert_ne!(a.path("x"), b.path("x"));
    }
}
