//! The controller processes of one variant: started, sampled from `/proc`, killed on drop.

use std::path::Path;
use std::process::{Child, Command, Stdio};

/// Clock ticks per second of `/proc/<pid>/stat` times (`USER_HZ`, 100 on Linux whatever the
/// kernel's own HZ; `getconf CLK_TCK`).
const USER_HZ: f64 = 100.0;

/// One variant's processes (one, or one per controller), killed when dropped so a failed round
/// leaves nothing running.
pub struct Procs {
    children: Vec<Child>,
    /// (label, log file) per child, for the error message when one exits early.
    logs: Vec<String>,
}

impl Procs {
    /// Starts each command, its stdout and stderr into `<dir>/<label>-<i>.log`.
    pub fn spawn(commands: Vec<Command>, dir: &Path, label: &str) -> Self {
        let mut procs = Self { children: Vec::new(), logs: Vec::new() };
        for (i, mut command) in commands.into_iter().enumerate() {
            let log = dir.join(format!("{label}-{i}.log"));
            let file = std::fs::File::create(&log).expect("a log file");
            command.stdout(Stdio::from(file.try_clone().unwrap())).stderr(Stdio::from(file));
            procs.children.push(command.spawn().unwrap_or_else(|e| panic!("starting {label}: {e}")));
            procs.logs.push(log.display().to_string());
        }
        procs
    }

    /// Panics, quoting its log, if a process has exited.
    pub fn check_running(&mut self) {
        for (child, log) in self.children.iter_mut().zip(&self.logs) {
            if let Some(status) = child.try_wait().unwrap() {
                let text = std::fs::read_to_string(log).unwrap_or_default();
                let tail: Vec<&str> = text.lines().rev().take(20).collect();
                let tail: Vec<&str> = tail.into_iter().rev().collect();
                panic!("a controller process exited ({status}); {log}:\n{}", tail.join("\n"));
            }
        }
    }

    fn status_kib(&self, field: &str) -> u64 {
        self.children.iter().map(|c| status_field(c.id(), field)).sum()
    }

    /// Resident set size now (`VmRSS`), summed over the processes, in MiB.
    pub fn rss_mib(&self) -> f64 {
        self.status_kib("VmRSS:") as f64 / 1024.0
    }

    /// Proportional set size now (`Pss` of `smaps_rollup`), summed over the processes, in MiB:
    /// a page mapped N times counts 1/N each time. RSS counts a page once per mapping, so a
    /// file or memory image several wasm instances map is counted once per instance there; PSS
    /// is what the pages cost, as the pod's memory cgroup is charged for them.
    pub fn pss_mib(&self) -> f64 {
        let pss = |pid: u32| {
            let rollup = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).unwrap_or_default();
            rollup
                .lines()
                .find_map(|l| l.strip_prefix("Pss:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
                .unwrap_or(0)
        };
        self.pids().into_iter().map(pss).sum::<u64>() as f64 / 1024.0
    }

    /// The processes and their live descendants (a compile child of `kubewasm`): what a pod's
    /// memory cgroup holds.
    fn pids(&self) -> Vec<u32> {
        let mut pids: Vec<u32> = self.children.iter().map(Child::id).collect();
        let mut i = 0;
        while i < pids.len() {
            pids.extend(children(pids[i]));
            i += 1;
        }
        pids
    }

    /// Copies each process's `smaps` (its memory, mapping by mapping) to
    /// `<dir>/<label>-<pid>.smaps`, to see where the memory goes.
    pub fn save_smaps(&self, dir: &Path, label: &str) {
        std::fs::create_dir_all(dir).unwrap();
        for child in &self.children {
            let pid = child.id();
            let smaps = std::fs::read(format!("/proc/{pid}/smaps")).unwrap_or_default();
            std::fs::write(dir.join(format!("{label}-{pid}.smaps")), smaps).unwrap();
        }
    }

    /// Peak resident set size (`VmHWM`), summed over the processes, in MiB. For several
    /// processes this is an upper bound of their simultaneous peak.
    pub fn peak_mib(&self) -> f64 {
        self.status_kib("VmHWM:") as f64 / 1024.0
    }

    /// User + system CPU time used so far, summed over the processes, their children waited for
    /// (a compile child) and their live descendants, in seconds.
    pub fn cpu_seconds(&self) -> f64 {
        let waited: u64 = self.children.iter().map(|c| children_cpu_ticks(c.id())).sum();
        cpu_seconds(self.pids()) + waited as f64 / USER_HZ
    }
}

/// User + system CPU time used so far by the processes `pids` (not their children), in seconds.
pub fn cpu_seconds(pids: impl IntoIterator<Item = u32>) -> f64 {
    pids.into_iter().map(cpu_ticks).sum::<u64>() as f64 / USER_HZ
}

/// The whole machine's CPU time so far (`/proc/stat`, all CPUs), in seconds: (busy, all). Busy is
/// everything but idle and I/O wait; steal (time the hypervisor gave to others) counts as busy.
pub fn machine_cpu_seconds() -> (f64, f64) {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let ticks: Vec<u64> = stat
        .lines()
        .find_map(|l| l.strip_prefix("cpu "))
        .map(|l| l.split_whitespace().filter_map(|v| v.parse().ok()).collect())
        .unwrap_or_default();
    // user nice system idle iowait irq softirq steal (guest time is already in user).
    let field = |i: usize| ticks.get(i).copied().unwrap_or(0);
    let all: u64 = (0..8).map(field).sum();
    ((all - field(3) - field(4)) as f64 / USER_HZ, all as f64 / USER_HZ)
}

impl Drop for Procs {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A `kB` field of `/proc/<pid>/status`; 0 if the process is gone.
fn status_field(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// `utime + stime` of `/proc/<pid>/stat` (fields 14 and 15).
fn cpu_ticks(pid: u32) -> u64 {
    stat_fields(pid, &[11, 12])
}

/// `cutime + cstime` of `/proc/<pid>/stat` (fields 16 and 17): its children that it waited for.
fn children_cpu_ticks(pid: u32) -> u64 {
    stat_fields(pid, &[13, 14])
}

/// The sum of the numeric fields at `indices` of `/proc/<pid>/stat` counted from field 3 (the
/// command name in field 2 may contain spaces, so count from the closing parenthesis): utime,
/// field 14, is index 11.
fn stat_fields(pid: u32, indices: &[usize]) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let Some((_, rest)) = stat.rsplit_once(')') else { return 0 };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    indices.iter().map(|&i| fields.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0)).sum()
}

/// The live children of every thread of `pid` (`/proc/<pid>/task/<tid>/children`).
fn children(pid: u32) -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return Vec::new() };
    let lists = tasks.flatten().filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok());
    lists.flat_map(|l| l.split_whitespace().filter_map(|p| p.parse().ok()).collect::<Vec<u32>>()).collect()
}
