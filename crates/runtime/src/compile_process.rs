//! Compiling a plugin in a child process that leaves its result in the compile cache. Cranelift's
//! working memory (≈ 20 MiB for a 0.5 MB component, which glibc keeps in its arenas for the life
//! of a process) and a compiler crash stay out of the host.
//!
//! The child is the host's own binary (`kubewasm compile-plugin`, hidden), run with the engine
//! settings of the host's runtime (the engine's `compile_child` is its side). It builds the same
//! engine and compiles the component read from stdin into the shared compile cache
//! (`compile_cache.rs`), where the host then loads it from. The host starts a child only when the
//! cache does not hold the component.
//!
//! No crate runs a wasmtime compile in another process, so this is hand-written.

use std::ffi::OsString;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};

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

/// How a runtime starts its compile processes: the executable, and the arguments that give the
/// child the runtime's engine and compile cache.
#[derive(Clone, Debug)]
pub(crate) struct CompileProcess {
    exe: PathBuf,
    args: Vec<OsString>,
}

impl CompileProcess {
    /// For a runtime whose engine is built from the settings `flags` (the child's arguments that
    /// build the same engine), with compile cache `cache_dir`, compiling with `exe`.
    pub(crate) fn new(exe: PathBuf, flags: impl IntoIterator<Item = (&'static str, String)>, cache_dir: &Path) -> Self {
        let mut args: Vec<OsString> = vec![SUBCOMMAND.into(), "--compile-cache".into(), cache_dir.into()];
        for (flag, value) in flags {
            args.push(flag.into());
            args.push(value.into());
        }
        Self { exe, args }
    }

    /// Compiles `wasm` into the compile cache in a child process.
    pub(crate) fn compile(&self, wasm: &[u8]) -> Result<(), Error> {
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
