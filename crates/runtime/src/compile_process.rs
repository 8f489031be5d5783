//! Compiling a plugin in a child process that leaves its result in the compile cache. Cranelift's
//! working memory (≈ 20 MiB for a 0.5 MB component, which glibc keeps in its arenas for the life
//! of a process) and a compiler crash stay out of the host.
//!
//! The child is the host's own binary (`kubewasm compile-plugin`, hidden), run with the engine
//! settings of the host's runtime (the engine's `compile_child` is its side). It builds the same engine, compiles the component
//! read from stdin into the shared wasmtime cache directory, then writes a marker, beside that
//! directory (wasmtime prunes files it does not know), named by the component's sha256 and the
//! engine's compatibility hash. The host compiles in a child only when that marker is missing.
//! Either way, it then loads the component through its own engine, which reads the cache. A
//! marker whose cache entry was evicted costs only an in-host compile.
//!
//! No crate runs a wasmtime compile in another process, so this is hand-written.

use std::ffi::OsString;
use std::hash::{Hash, Hasher};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};

use sha2::{Digest as _, Sha256};
use wasmtime::Engine;

/// The subcommand the child runs.
pub const SUBCOMMAND: &str = "compile-plugin";

/// Errors compiling in a child process.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The child could not be started or fed.
    #[error("cannot run the compile process {exe}: {source}")]
    Spawn {
        /// The executable.
        exe: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The child ended without compiling: the component is invalid, or the compiler crashed.
    #[error("compile process failed ({status}): {stderr}")]
    Failed {
        /// How it ended.
        status: ExitStatus,
        /// The end of what it wrote to stderr.
        stderr: String,
    },
}

/// How a runtime starts its compile processes: the executable, the arguments that give the child
/// the runtime's engine, and where the markers live.
#[derive(Clone, Debug)]
pub(crate) struct CompileProcess {
    exe: PathBuf,
    args: Vec<OsString>,
    markers: PathBuf,
    engine_hash: String,
}

impl CompileProcess {
    /// For a runtime whose engine is `engine`, built from the settings `flags` (the child's
    /// arguments that build the same engine), with compile cache `cache_dir`, compiling with
    /// `exe`.
    pub(crate) fn new(
        exe: PathBuf,
        flags: impl IntoIterator<Item = (&'static str, String)>,
        cache_dir: &Path,
        engine: &Engine,
    ) -> Self {
        let mut args: Vec<OsString> = vec![SUBCOMMAND.into(), "--compile-cache".into(), cache_dir.into()];
        for (flag, value) in flags {
            args.push(flag.into());
            args.push(value.into());
        }
        Self { exe, args, markers: markers(cache_dir), engine_hash: engine_hash(engine) }
    }

    /// Makes sure the component with this sha256 is in the compile cache, compiling it in a child
    /// process unless a marker says a child already did.
    pub(crate) fn ensure_cached(&self, wasm: &[u8], sha256: &str) -> Result<(), Error> {
        if marker(&self.markers, sha256, &self.engine_hash).exists() {
            return Ok(());
        }
        let spawn = |source| Error::Spawn { exe: self.exe.clone(), source };
        let mut child = Command::new(&self.exe)
            .args(&self.args)
            .stdin(Stdio::piped())
            // Piped, not null: a container or chroot may have no /dev/null to open.
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(spawn)?;
        let mut stdin = child.stdin.take().expect("piped stdin");
        // Fed from a thread so that a child writing much to stderr before reading cannot block.
        // A write error means the child ended early; its exit status says why.
        let output = std::thread::scope(|s| {
            let feeder = s.spawn(move || stdin.write_all(wasm));
            let output = child.wait_with_output();
            let _ = feeder.join();
            output
        })
        .map_err(spawn)?;
        if output.status.success() {
            return Ok(());
        }
        let stderr = String::from_utf8_lossy(&output.stderr);
        let tail: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).rev().take(5).collect();
        let stderr = tail.into_iter().rev().collect::<Vec<_>>().join(" / ");
        Err(Error::Failed { status: output.status, stderr })
    }
}

/// Writes the marker that says the component with this sha256 is in the compile cache
/// `cache_dir` for `engine`: the child's last step, once it has compiled the component.
pub(crate) fn mark_compiled(cache_dir: &Path, sha256: &str, engine: &Engine) -> std::io::Result<()> {
    let dir = markers(cache_dir);
    std::fs::create_dir_all(&dir)?;
    std::fs::write(marker(&dir, sha256, &engine_hash(engine)), b"")
}

/// The directory of markers inside a compile cache, beside [`wasmtime_dir`].
fn markers(cache_dir: &Path) -> PathBuf {
    cache_dir.join("kubewasm-compiled")
}

/// The directory wasmtime's cache keeps its files in, inside a compile cache. Its cleanup worker
/// deletes every file there it does not recognise, markers included, at a time of its own: the
/// markers must live beside it.
pub(crate) fn wasmtime_dir(cache_dir: &Path) -> PathBuf {
    cache_dir.join("wasmtime")
}

fn marker(markers: &Path, sha256: &str, engine_hash: &str) -> PathBuf {
    markers.join(format!("{sha256}-{engine_hash}"))
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
    use super::*;

    #[test]
    fn markers_live_outside_the_directory_wasmtimes_cleanup_worker_prunes() {
        let cache = Path::new("/var/cache/kubewasm");
        assert!(!markers(cache).starts_with(wasmtime_dir(cache)), "{:?}", markers(cache));
        assert!(!wasmtime_dir(cache).starts_with(markers(cache)));
    }
}
