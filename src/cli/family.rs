//! Everything `retrylab grade` starts ends with it. CMD leads a process group of its own, and
//! the grade becomes the subreaper of its descendants (Linux's `PR_SET_CHILD_SUBREAPER`), so a
//! process that leaves the group (`setsid`, a double-forking daemon) comes back to the grade as
//! an orphan instead of to init, and is ended with the rest. A grade that is itself killed
//! (SIGKILL, which no process can catch) cannot end anything: its folder keeps the list of what
//! it started, and the next grade ends those and removes the folder (`clean_after_killed`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The folders grades work in: `retrylab-grade-<uuid>` in the temporary folder.
pub const FOLDER_PREFIX: &str = "retrylab-grade-";

const PROCESSES: &str = "processes";
const OWNER: &str = "grade";

/// What the folder says to a person who finds it after a grade was killed.
const README: &str = "This folder belongs to a run of `retrylab grade`. If that grade was killed \
(kill -9), the processes it started may still run: `processes` lists them as \"pid start-time\", \
and `kill -9 PID` ends each (check `ps -o pid,lstart -p PID` first). The next `retrylab grade` \
ends them and removes this folder by itself.\n";

/// One process, named so that a reused pid is never mistaken for it: its pid and the time it
/// started (in clock ticks since boot, field 22 of `/proc/PID/stat`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Process {
    pid: i32,
    started: u64,
}

impl Process {
    fn current(pid: i32) -> Option<(Process, i32, bool)> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // The name (field 2) is in parentheses and may hold spaces: read after the last one.
        let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
        let (state, parent, started) =
            (fields.first()?, fields.get(1)?.parse().ok()?, fields.get(19)?.parse().ok()?);
        Some((Process { pid, started }, parent, *state == "Z"))
    }

    /// Whether this very process still runs (a zombie does not).
    fn runs(self) -> bool {
        Process::current(self.pid).is_some_and(|(now, _, zombie)| now == self && !zombie)
    }

    fn kill(self) {
        if self.runs() {
            // SAFETY: kill(2) sends a signal to a process id; it touches no memory.
            unsafe {
                libc::kill(self.pid, libc::SIGKILL);
            }
        }
    }
}

/// Every process in the system with its parent.
fn parents() -> HashMap<i32, (Process, i32)> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return HashMap::new() };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|pid| Process::current(pid).map(|(p, parent, _)| (pid, (p, parent))))
        .collect()
}

/// The processes that descend from this one (orphans that came back to it included).
fn descendants() -> Vec<Process> {
    let me = std::process::id() as i32;
    let all = parents();
    let mut found = Vec::new();
    let mut frontier = vec![me];
    while let Some(parent) = frontier.pop() {
        for (pid, (process, of)) in &all {
            if *of == parent && *pid != me {
                found.push(*process);
                frontier.push(*pid);
            }
        }
    }
    found
}

/// CMD's family: its group, the orphans that come back to the grade, and the folder that
/// lists them in case the grade is killed.
pub struct Family {
    leader: i32,
    folder: PathBuf,
    known: Vec<Process>,
    noted: Instant,
}

impl Family {
    /// Makes the grade the reaper of its orphans, and notes in `folder` who owns it. Call it
    /// before CMD starts.
    pub fn prepare(folder: &Path) -> Result<(), String> {
        std::fs::create_dir_all(folder).map_err(|e| format!("cannot make {}: {e}", folder.display()))?;
        // SAFETY: prctl(2) with PR_SET_CHILD_SUBREAPER sets a flag of this process; no memory.
        unsafe {
            libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
        }
        let me = Process::current(std::process::id() as i32).map(|(p, _, _)| p);
        let owner = me.map(|p| format!("{} {}\n", p.pid, p.started)).unwrap_or_default();
        let write = |name: &str, text: &str| std::fs::write(folder.join(name), text);
        write(OWNER, &owner).and(write("README", README)).map_err(|e| e.to_string())
    }

    /// The family of CMD, which leads group `leader` (its pid).
    pub fn of(leader: u32, folder: &Path) -> Family {
        let mut family = Family {
            leader: leader as i32,
            folder: folder.to_owned(),
            known: Vec::new(),
            noted: Instant::now(),
        };
        family.note();
        family
    }

    /// Notes the processes CMD has started so far in the folder, at most every 250 ms.
    pub fn note_now_and_then(&mut self) {
        if self.noted.elapsed() >= Duration::from_millis(250) {
            self.note();
        }
    }

    fn note(&mut self) {
        self.noted = Instant::now();
        let now = descendants();
        if now == self.known {
            return;
        }
        self.known = now;
        let list: String = self.known.iter().map(|p| format!("{} {}\n", p.pid, p.started)).collect();
        let _ = std::fs::write(self.folder.join(PROCESSES), list);
    }

    /// Ends CMD's group (CMD itself is then the caller's to wait for).
    pub fn kill_group(&self) {
        // SAFETY: kill(2) with a negative id signals a process group; it touches no memory.
        unsafe {
            libc::kill(-self.leader, libc::SIGKILL);
        }
    }

    /// Ends CMD's group and every descendant of the grade, and reaps them, until none is left
    /// (an orphan comes back to the grade only once its parent has ended). Call it after CMD
    /// itself was waited for.
    pub fn end(&self) {
        self.kill_group();
        let start = Instant::now();
        loop {
            let left = descendants();
            for process in &left {
                process.kill();
            }
            reap();
            if left.is_empty() || start.elapsed() > Duration::from_secs(5) {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Family {
    fn drop(&mut self) {
        self.end();
    }
}

/// Reads the exit of every child that has ended, so none stays a zombie.
fn reap() {
    loop {
        let mut status = 0;
        // SAFETY: waitpid(2) writes the status into a local integer.
        let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
        if pid <= 0 {
            return;
        }
    }
}

/// Ends what killed grades left behind and removes their folders: a folder in `temp` whose
/// grade no longer runs. Returns how many it cleaned.
pub fn clean_after_killed(temp: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(temp) else { return 0 };
    let mut cleaned = 0;
    for entry in entries.flatten() {
        let folder = entry.path();
        if !entry.file_name().to_string_lossy().starts_with(FOLDER_PREFIX) {
            continue;
        }
        let read = |name: &str| -> Vec<Process> {
            let text = std::fs::read_to_string(folder.join(name)).unwrap_or_default();
            text.lines()
                .filter_map(|l| {
                    let (pid, started) = l.split_once(' ')?;
                    Some(Process { pid: pid.parse().ok()?, started: started.trim().parse().ok()? })
                })
                .collect()
        };
        let owner = read(OWNER);
        // A folder without its owner's line is a grade starting this moment, or not ours.
        let Some(owner) = owner.first() else { continue };
        if owner.runs() {
            continue;
        }
        for process in read(PROCESSES) {
            process.kill();
        }
        if std::fs::remove_dir_all(&folder).is_ok() {
            cleaned += 1;
        }
    }
    cleaned
}
