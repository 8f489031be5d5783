//! A child process in its own process group that cannot outlive the test binary.
//!
//! Each child is started as the leader of a new process group, so it gets no terminal signals
//! meant for `cargo test` and can be killed together with anything it forks. Beside it runs a
//! watchdog — a `sh` in the same process group that blocks reading a pipe whose only write end is
//! held by this process. When the test binary exits for any reason (normal exit, panic, SIGKILL),
//! the kernel closes that pipe, `read` returns, and the watchdog kills the whole group. This needs
//! no `unsafe` (no `pre_exec`/`PR_SET_PDEATHSIG`) and does not depend on which thread spawned the
//! child, which matters because test threads come and go.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};

use anyhow::Context;

/// How many lines of a child's log a start-up error quotes.
const LOG_TAIL_LINES: usize = 40;

/// A running child process, its watchdog and its log file; killed (whole group) on drop.
#[derive(Debug)]
pub(crate) struct Supervised {
    name: String,
    child: Child,
    watchdog: Child,
    /// The write end of the watchdog's stdin; closing it makes the watchdog kill the group.
    lifeline: Option<ChildStdin>,
    log: PathBuf,
}

impl Supervised {
    /// Starts `program args` as a new process group, stdout and stderr appended to `log`.
    pub(crate) fn spawn(name: &str, program: &Path, args: &[String], log: &Path) -> anyhow::Result<Self> {
        let out = OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .with_context(|| format!("opening {}", log.display()))?;
        let err = out.try_clone()?;
        let child = Command::new(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .process_group(0)
            .spawn()
            .with_context(|| format!("starting {name} ({})", program.display()))?;
        let pgid = child.id();
        let watchdog = Command::new("sh")
            .arg("-c")
            // `read` returns at EOF: this process is gone or dropped us. Kill the group, ourselves included.
            .arg("read _ignored; kill -9 -$0")
            .arg(pgid.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(pgid as i32)
            .spawn();
        let mut watchdog = match watchdog {
            Ok(w) => w,
            Err(e) => {
                let mut child = child;
                let _ = child.kill();
                let _ = child.wait();
                return Err(anyhow::Error::new(e)
                    .context(format!("starting the watchdog of {name} (did it exit at once?)\n{}", log_tail(log))));
            }
        };
        let lifeline = watchdog.stdin.take();
        Ok(Self { name: name.to_owned(), child, watchdog, lifeline, log: log.to_owned() })
    }

    /// `Err` with the exit status and the log's tail if the process has exited.
    pub(crate) fn check_running(&mut self) -> anyhow::Result<()> {
        match self.child.try_wait()? {
            None => Ok(()),
            Some(status) => anyhow::bail!("{} exited early ({status})\n{}", self.name, self.log_tail()),
        }
    }

    /// The last lines of the log, for error messages.
    pub(crate) fn log_tail(&self) -> String {
        log_tail(&self.log)
    }

    /// Sends SIGTERM to the process (not its group): a graceful shutdown, as a rolling
    /// restart's.
    pub(crate) fn terminate(&self) -> anyhow::Result<()> {
        self.signal("-TERM")
    }

    /// Sends `signal` (e.g. `-STOP`, `-CONT`) to the process (not its group).
    pub(crate) fn signal(&self, signal: &str) -> anyhow::Result<()> {
        let pid = self.child.id().to_string();
        let status = Command::new("kill").args([signal, &pid]).status().context("running kill")?;
        anyhow::ensure!(status.success(), "kill {signal} {pid} failed: {status}");
        Ok(())
    }

    /// The process id.
    pub(crate) fn id(&self) -> u32 {
        self.child.id()
    }

    /// Whether the process has exited.
    pub(crate) fn exited(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(Some(_)))
    }

    /// Kills the whole process group and reaps the child and its watchdog.
    pub(crate) fn kill(mut self) {
        self.kill_group();
    }

    fn kill_group(&mut self) {
        let _ = self.child.kill();
        // Closing the lifeline makes the watchdog kill the rest of the group and itself.
        drop(self.lifeline.take());
        let _ = self.child.wait();
        let _ = self.watchdog.wait();
    }
}

impl Drop for Supervised {
    fn drop(&mut self) {
        self.kill_group();
    }
}

/// Removes `dir` once this process has exited: for the shared control plane, which lives in a
/// `static` and is therefore never dropped. Returns the lifeline; dropping it also triggers removal.
pub(crate) fn remove_at_exit(dir: &Path) -> anyhow::Result<ChildStdin> {
    let mut janitor = Command::new("sh")
        .arg("-c")
        // Give the watchdogs a moment to kill the processes writing into the directory.
        .arg("read _ignored; sleep 1; rm -rf \"$0\" || { sleep 2; rm -rf \"$0\"; }")
        .arg(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .context("starting the temp-dir janitor")?;
    let lifeline = janitor.stdin.take().context("janitor stdin")?;
    // Reap it from a thread so it does not linger as a zombie after an owned instance drops.
    std::thread::spawn(move || janitor.wait());
    Ok(lifeline)
}

/// The last [`LOG_TAIL_LINES`] lines of a log file, headed by its path.
pub(crate) fn log_tail(path: &Path) -> String {
    let mut text = String::new();
    if let Ok(mut f) = File::open(path) {
        let len = f.metadata().map(|m| m.len()).unwrap_or(0);
        let _ = f.seek(SeekFrom::Start(len.saturating_sub(64 * 1024)));
        let mut bytes = Vec::new();
        let _ = f.read_to_end(&mut bytes);
        text = String::from_utf8_lossy(&bytes).into_owned();
    }
    let lines: Vec<&str> = text.lines().collect();
    let tail = lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n");
    format!("--- last lines of {} ---\n{tail}", path.display())
}
