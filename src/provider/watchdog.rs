//! What keeps a local instance's process tree from outliving orchestrate, however it ends.
//!
//! Each local instance runs in its own process group, carries a marker variable
//! (`ORCHESTRATE_INSTANCE=<run>/<deployment>/<role>-<index>/<orchestrate pid>.<launch number>`) that its descendants inherit, and
//! gets a watchdog: a small `sh` in a group of its own, reading a pipe whose only writer is
//! orchestrate. When the pipe closes without a word (orchestrate died, even by SIGKILL), the
//! watchdog sends the group SIGTERM (with SIGCONT, for a stopped member), then SIGKILL, then kills every process still carrying the
//! marker (children that left the group with `setsid`), and exits. A normal stop ends the
//! watchdog quietly after stopping the group itself.
//!
//! Each instance also leaves a record, `<state dir>/instances/<run>.<deployment>.<role>-<index>.<pid>.json`,
//! removed on stop; `orchestrate ps` lists the records whose processes still live and
//! `orchestrate clean` kills those whose owner is gone. The state dir is
//! `$ORCHESTRATE_STATE_DIR`, else `$XDG_RUNTIME_DIR/orchestrate`, else
//! `/tmp/orchestrate-<uid>`.
//!
//! Does not own: starting or stopping the instance (the local provider does).

use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};

use serde::{Deserialize, Serialize};

/// The environment variable that marks every process of a local instance.
pub const MARKER: &str = "ORCHESTRATE_INSTANCE";

/// The watchdog: `$1` is the group, `$2` the marker line. Signals that would end it early
/// (a terminal's Ctrl-C or hang-up) are ignored; only the pipe decides.
const SCRIPT: &str = r#"trap '' INT TERM HUP
if read -r word && [ "$word" = stop ]; then exit 0; fi
kill -TERM -"$1" 2>/dev/null
kill -CONT -"$1" 2>/dev/null
i=0
while kill -0 -"$1" 2>/dev/null && [ "$i" -lt 30 ]; do sleep 0.1; i=$((i+1)); done
kill -KILL -"$1" 2>/dev/null
for e in /proc/[0-9]*/environ; do
  if tr '\0' '\n' < "$e" 2>/dev/null | grep -qxF "$2"; then
    p=${e#/proc/}; kill -KILL "${p%/environ}" 2>/dev/null
  fi
done
exit 0
"#;

/// What a record on disk says about one local instance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstanceRecord {
    pub run: String,
    pub task: String,
    pub deployment: String,
    pub role: String,
    pub index: usize,
    /// The instance's process group (= its shell's pid).
    pub pgid: i32,
    /// The watchdog's pid.
    pub watchdog: i32,
    /// The orchestrate process that started it.
    pub owner: u32,
    /// The marker's value (`ORCHESTRATE_INSTANCE=<marker>`).
    pub marker: String,
}

impl InstanceRecord {
    /// The marker value for a new instance of this orchestrate process. Run ids are only
    /// unique per results directory, so the owner's pid is part of it, and one process may
    /// launch the same run/deployment/role/index twice (a resumed run, concurrent tests), so
    /// a per-process launch number ends it: killing by marker never reaches another launch.
    pub fn marker_for(run: &str, deployment: &str, role: &str, index: usize) -> String {
        static LAUNCHES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = LAUNCHES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        format!(
            "{run}/{deployment}/{role}-{index}/{}.{n}",
            std::process::id()
        )
    }

    fn file_name(&self) -> String {
        // The marker is unique per launch; so is the file.
        let raw = format!("{}.json", self.marker.replace('/', "."));
        raw.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || "-_.=".contains(c) {
                    c
                } else {
                    '_'
                }
            })
            .collect()
    }

    /// Live processes of this instance: the group's members and whoever carries the marker.
    pub fn live_pids(&self) -> Vec<i32> {
        let line = format!("{MARKER}={}", self.marker);
        live_processes()
            .into_iter()
            .filter(|p| p.pid > 0 && (p.pgrp == self.pgid || p.has_env(&line)))
            .map(|p| p.pid)
            .collect()
    }

    /// Whether the orchestrate that started it is gone.
    pub fn owner_gone(&self) -> bool {
        !pid_alive(self.owner as i32)
    }

    /// Kill the group and every marked process (SIGKILL); true when something was alive.
    pub fn kill(&self) -> bool {
        let pids = self.live_pids();
        kill_group(self.pgid, libc::SIGKILL);
        for &pid in &pids {
            // SAFETY: kill has no memory-safety preconditions.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
        }
        // The watchdog has nothing left to guard (0 or less would name a whole group).
        if self.watchdog > 0 {
            // SAFETY: as above; a gone watchdog yields ESRCH.
            unsafe {
                libc::kill(self.watchdog, libc::SIGKILL);
            }
        }
        !pids.is_empty()
    }
}

/// The directory of local instance records.
pub fn state_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("ORCHESTRATE_STATE_DIR") {
        return PathBuf::from(dir);
    }
    if let Some(dir) = std::env::var_os("XDG_RUNTIME_DIR") {
        return PathBuf::from(dir).join("orchestrate");
    }
    // SAFETY: getuid cannot fail.
    let uid = unsafe { libc::getuid() };
    std::env::temp_dir().join(format!("orchestrate-{uid}"))
}

/// Every record in the state dir (unreadable ones are skipped).
pub fn records() -> Vec<(PathBuf, InstanceRecord)> {
    let Ok(entries) = std::fs::read_dir(state_dir().join("instances")) else {
        return Vec::new();
    };
    let mut found: Vec<(PathBuf, InstanceRecord)> = entries
        .flatten()
        .filter_map(|e| {
            let text = std::fs::read_to_string(e.path()).ok()?;
            Some((e.path(), serde_json::from_str(&text).ok()?))
        })
        .collect();
    found.sort_by(|a, b| {
        (&a.1.run, &a.1.deployment, &a.1.role, a.1.index).cmp(&(
            &b.1.run,
            &b.1.deployment,
            &b.1.role,
            b.1.index,
        ))
    });
    found
}

/// A running watchdog and the record of its instance. [`Watchdog::disarm`] after stopping
/// the group; dropping it armed lets the watchdog kill the group at once.
pub struct Watchdog {
    child: Child,
    pipe: Option<ChildStdin>,
    record: Option<PathBuf>,
}

impl Watchdog {
    /// Start a watchdog over group `pgid` and write the instance's record (a record that
    /// cannot be written is logged: the watchdog still guards the group).
    pub fn start(mut record: InstanceRecord, log: &super::LogSink) -> Result<Self, std::io::Error> {
        let marker_line = format!("{MARKER}={}", record.marker);
        let mut child = Command::new("sh")
            .args(["-c", SCRIPT, "watchdog"])
            .arg(record.pgid.to_string())
            .arg(&marker_line)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()?;
        let pipe = child.stdin.take();
        record.watchdog = child.id() as i32;
        let path = match write_record(&record) {
            Ok(path) => Some(path),
            Err(e) => {
                log.line(&format!(
                    "[orchestrate] cannot record process group {} under {}: {e}; `orchestrate ps` will not list it",
                    record.pgid,
                    state_dir().display()
                ));
                None
            }
        };
        Ok(Self {
            child,
            pipe,
            record: path,
        })
    }

    /// The group is stopped: end the watchdog without a kill and remove the record.
    pub fn disarm(mut self) {
        if let Some(mut pipe) = self.pipe.take() {
            let _ = pipe.write_all(b"stop\n");
        }
        let _ = self.child.wait();
        if let Some(path) = self.record.take() {
            let _ = std::fs::remove_file(path);
        }
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        // Armed: closing the pipe makes the watchdog kill the group; reap it in the
        // background (it ends within seconds).
        self.pipe.take();
        if let Some(path) = self.record.take() {
            let _ = std::fs::remove_file(path);
        }
    }
}

fn write_record(record: &InstanceRecord) -> std::io::Result<PathBuf> {
    let dir = state_dir().join("instances");
    std::fs::create_dir_all(&dir)?;
    let path = dir.join(record.file_name());
    let text = serde_json::to_string_pretty(record).map_err(std::io::Error::other)?;
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, &path)?;
    Ok(path)
}

/// Kill every process carrying `marker` (SIGKILL): children that left the group.
pub fn kill_marked(marker: &str) -> usize {
    let line = format!("{MARKER}={marker}");
    let mut killed = 0;
    for p in live_processes() {
        if p.pid > 0 && p.has_env(&line) {
            // SAFETY: kill has no memory-safety preconditions.
            unsafe {
                libc::kill(p.pid, libc::SIGKILL);
            }
            killed += 1;
        }
    }
    killed
}

pub(crate) fn kill_group(pgid: i32, signal: i32) {
    if pgid <= 1 {
        return; // 0 would be our own group, 1 init's
    }
    // SAFETY: killpg has no memory-safety preconditions; a stale pgid yields ESRCH.
    unsafe {
        libc::killpg(pgid, signal);
    }
}

fn pid_alive(pid: i32) -> bool {
    // SAFETY: signal 0 only checks that the process exists; nothing is sent.
    let rc = unsafe { libc::kill(pid, 0) };
    rc == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// One process of this machine, from `/proc`.
struct Proc {
    pid: i32,
    pgrp: i32,
}

impl Proc {
    fn has_env(&self, line: &str) -> bool {
        std::fs::read(format!("/proc/{}/environ", self.pid))
            .is_ok_and(|env| env.split(|&b| b == 0).any(|entry| entry == line.as_bytes()))
    }
}

/// Every live (not zombie) process: `/proc/<pid>/stat` is "pid (comm) state ppid pgrp ...".
fn live_processes() -> Vec<Proc> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| {
            let pid: i32 = e.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            let rest = stat.rsplit_once(") ")?.1;
            let fields: Vec<&str> = rest.split_whitespace().collect();
            if fields.first() == Some(&"Z") {
                return None;
            }
            Some(Proc {
                pid,
                pgrp: fields.get(2)?.parse().ok()?,
            })
        })
        .collect()
}

/// Whether any live process is in group `pgid`.
pub fn group_has_members(pgid: i32) -> bool {
    live_processes().iter().any(|p| p.pgrp == pgid)
}

/// Where a record lives, for messages.
pub fn describe(path: &Path, record: &InstanceRecord) -> String {
    format!(
        "process group {} of {}/{}/{}-{} ({})",
        record.pgid,
        record.run,
        record.deployment,
        record.role,
        record.index,
        path.display()
    )
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;

    fn wait_until(what: &str, f: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !f() {
            assert!(Instant::now() < deadline, "{what}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn group(marker: &str) -> Child {
        // A group whose member escapes it with setsid (still marked).
        Command::new("sh")
            .args(["-c", "setsid sleep 301 & sleep 300 & wait"])
            .env(MARKER, marker)
            .process_group(0)
            .spawn()
            .unwrap()
    }

    fn record(pgid: i32, marker: &str) -> InstanceRecord {
        InstanceRecord {
            run: "r".into(),
            task: "t".into(),
            deployment: "d1".into(),
            role: "server".into(),
            index: 0,
            pgid,
            watchdog: 0,
            owner: std::process::id(),
            marker: marker.into(),
        }
    }

    #[test]
    fn a_closed_pipe_kills_the_group_and_its_escapees_and_disarm_does_not() {
        let dir = tempfile::tempdir().unwrap();
        // SAFETY: tests of this module are the only readers of the variable.
        unsafe { std::env::set_var("ORCHESTRATE_STATE_DIR", dir.path()) };
        let marker = format!("test-{}-a", std::process::id());
        let mut leader = group(&marker);
        let pgid = leader.id() as i32;
        let rec = record(pgid, &marker);
        wait_until("the escapee started", || rec.live_pids().len() >= 3);
        let dog = Watchdog::start(rec.clone(), &super::super::LogSink::memory()).unwrap();
        let mine = |marker: &str| {
            records()
                .into_iter()
                .filter(|(_, r)| r.marker == marker)
                .map(|(_, r)| r.pgid)
                .collect::<Vec<_>>()
        };
        assert_eq!(mine(&marker), [pgid]);
        drop(dog);
        wait_until("the watchdog killed the tree", || {
            rec.live_pids().is_empty()
        });
        leader.wait().unwrap();

        let marker = format!("test-{}-b", std::process::id());
        let mut leader = group(&marker);
        let pgid = leader.id() as i32;
        let rec = record(pgid, &marker);
        let dog = Watchdog::start(rec.clone(), &super::super::LogSink::memory()).unwrap();
        dog.disarm();
        std::thread::sleep(Duration::from_millis(300));
        assert!(group_has_members(pgid), "disarm must not kill");
        assert!(mine(&marker).is_empty(), "disarm removes the record");
        assert!(rec.kill());
        wait_until("kill ends the tree", || rec.live_pids().is_empty());
        leader.wait().unwrap();
    }
}
