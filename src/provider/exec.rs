//! Running a command in a running instance (`Instance::exec`), as external benchmark tools
//! need: in its container, or on its host. The output streams into a log as it comes and is
//! also captured for parsing. The returned future owns the command: dropping it (timeout,
//! Ctrl-C) kills the command and everything it started.
//!
//! This module has the request/output types and the local implementation (a process group
//! on this machine), used by local processes and by `where: host` next to a local engine.

use std::sync::{Arc, Mutex};

use tokio::io::{AsyncRead, AsyncReadExt};

use super::{ExitInfo, LogSink, ProviderError};

/// Most bytes of stdout (and of stderr) kept for parsing; the log gets everything.
pub const CAPTURE_LIMIT: usize = 16 * 1024 * 1024;

/// Where the command runs, relative to the instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExecTarget {
    /// In the instance itself (its container; for a process, its host).
    Instance,
    /// On the host that runs the instance.
    Host,
}

/// A command to run next to a running instance.
#[derive(Debug, Clone)]
pub struct ExecRequest {
    /// Run with `sh -c`.
    pub command: String,
    pub target: ExecTarget,
    /// Added to the environment (the instance's env, so the tool sees what the server saw).
    pub env: Vec<(String, String)>,
    /// stdout and stderr, as they come.
    pub log: LogSink,
}

/// How a command ended and what it printed.
#[derive(Debug, Clone)]
pub struct ExecOutput {
    pub exit: ExitInfo,
    pub stdout: String,
    pub stderr: String,
}

impl ExecOutput {
    pub fn success(&self) -> bool {
        self.exit.code == Some(0)
    }
}

/// Output captured while it is also streamed into a log.
#[derive(Clone, Default)]
pub(crate) struct Capture {
    stdout: Arc<Mutex<Vec<u8>>>,
    stderr: Arc<Mutex<Vec<u8>>>,
}

impl Capture {
    pub(crate) fn push(&self, stderr: bool, bytes: &[u8], log: &LogSink) {
        log.write(bytes);
        let buf = if stderr { &self.stderr } else { &self.stdout };
        let mut buf = buf.lock().unwrap_or_else(|p| p.into_inner());
        let room = CAPTURE_LIMIT.saturating_sub(buf.len());
        buf.extend_from_slice(&bytes[..bytes.len().min(room)]);
    }

    pub(crate) fn finish(&self, exit: ExitInfo) -> ExecOutput {
        let text = |b: &Arc<Mutex<Vec<u8>>>| {
            String::from_utf8_lossy(&b.lock().unwrap_or_else(|p| p.into_inner())).into_owned()
        };
        ExecOutput {
            exit,
            stdout: text(&self.stdout),
            stderr: text(&self.stderr),
        }
    }
}

/// Quote `s` for a POSIX shell.
pub fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// A shell script printing the file named by its first argument (no `cat` needed, so it
/// works in minimal images).
pub const PRINT_FILE: &str =
    r#"while IFS= read -r l || [ -n "$l" ]; do printf '%s\n' "$l"; done < "$1""#;

/// Kills a process group when dropped (the command was abandoned, or it is over and its
/// leftovers must go).
struct GroupGuard(i32);

impl Drop for GroupGuard {
    fn drop(&mut self) {
        // SAFETY: killpg has no memory-safety preconditions; a gone group yields ESRCH.
        unsafe {
            libc::killpg(self.0, libc::SIGKILL);
        }
    }
}

/// Run `request.command` with `sh -c` on this machine in its own process group. Dropping
/// the future kills the group; so does the end of the command (nothing it started in the
/// background outlives it), and output pipes still held after that by a process that left
/// the group are read for at most [`super::group::PUMP_DRAIN`].
pub async fn run_local(request: ExecRequest) -> Result<ExecOutput, ProviderError> {
    let mut command = super::group::group_shell(&["-c", &request.command], &request.env);
    command.kill_on_drop(true);
    let mut child = command.spawn().map_err(|source| ProviderError::Spawn {
        what: request.command.clone(),
        source,
    })?;
    let pid = child.id().expect("a spawned child has a pid") as i32;
    let _guard = GroupGuard(pid);
    let capture = Capture::default();
    let out = child.stdout.take().expect("stdout is piped");
    let err = child.stderr.take().expect("stderr is piped");
    let wait = async {
        let status = child.wait().await;
        // What the command left running in the background would hold the pipes open.
        // SAFETY: killpg has no memory-safety preconditions.
        unsafe {
            libc::killpg(pid, libc::SIGKILL);
        }
        status
    };
    let pumps = async {
        tokio::join!(
            pump(out, false, &capture, &request.log),
            pump(err, true, &capture, &request.log)
        );
    };
    tokio::pin!(pumps, wait);
    let (status, pumped) = tokio::select! {
        status = &mut wait => (status, false),
        () = &mut pumps => (wait.await, true),
    };
    if !pumped {
        // A process that left the group (`setsid`) may hold the pipes for ever: read what
        // is there, then stop waiting.
        let _ = tokio::time::timeout(super::group::PUMP_DRAIN, &mut pumps).await;
    }
    let exit = match status {
        Ok(status) => {
            use std::os::unix::process::ExitStatusExt;
            ExitInfo {
                code: status.code(),
                signal: status.signal(),
            }
        }
        Err(_) => ExitInfo {
            code: None,
            signal: None,
        },
    };
    Ok(capture.finish(exit))
}

async fn pump(mut reader: impl AsyncRead + Unpin, stderr: bool, capture: &Capture, log: &LogSink) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        match reader.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => capture.push(stderr, &buf[..n], log),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn request(command: &str) -> ExecRequest {
        ExecRequest {
            command: command.into(),
            target: ExecTarget::Host,
            env: vec![("GREETING".into(), "hi".into())],
            log: LogSink::memory(),
        }
    }

    #[tokio::test]
    async fn output_is_captured_and_logged_with_the_exit_code() {
        let r = request("echo out $GREETING; echo err >&2; exit 3");
        let log = r.log.clone();
        let out = run_local(r).await.unwrap();
        assert_eq!(out.exit.code, Some(3));
        assert_eq!(out.stdout, "out hi\n");
        assert_eq!(out.stderr, "err\n");
        let mut tail = log.tail(10);
        tail.sort();
        assert_eq!(tail, vec!["err".to_string(), "out hi".to_string()]);
    }

    #[tokio::test]
    async fn dropping_the_future_kills_the_whole_group() {
        let dir = tempfile::tempdir().unwrap();
        let pidfile = dir.path().join("pid");
        let r = request(&format!("sleep 30 & echo $! > {}; wait", pidfile.display()));
        let run = run_local(r);
        let _ = tokio::time::timeout(Duration::from_millis(500), run).await;
        let pid: i32 = std::fs::read_to_string(&pidfile)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        // The killed sleep is reaped by init (it may linger as a zombie briefly).
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        loop {
            let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok();
            let alive = state.is_some_and(|s| {
                s.rsplit_once(") ")
                    .is_some_and(|(_, rest)| !rest.starts_with('Z'))
            });
            if !alive {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "sleep {pid} survived");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    #[tokio::test]
    async fn a_child_that_left_the_group_holding_stdout_does_not_hang_the_command() {
        let dir = tempfile::tempdir().unwrap();
        let pidfile = dir.path().join("pid");
        let r = request(&format!(
            "setsid sleep 30 & echo $! > {}; echo done",
            pidfile.display()
        ));
        let out = tokio::time::timeout(Duration::from_secs(5), run_local(r)).await;
        let pid: i32 = std::fs::read_to_string(&pidfile)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        // SAFETY: the sleep this test started.
        unsafe { libc::kill(pid, libc::SIGKILL) };
        let out = out
            .expect("the command ended but its run hung on the pipe")
            .unwrap();
        assert_eq!(out.stdout, "done\n");
    }

    #[tokio::test]
    async fn print_file_prints_a_file_without_cat() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("r.json");
        std::fs::write(&file, "{\"a\": 1,\n \"b\": 'x'}").unwrap();
        let r = request(&format!(
            "sh -c {} sh {}",
            shell_quote(PRINT_FILE),
            shell_quote(&file.display().to_string())
        ));
        let out = run_local(r).await.unwrap();
        assert!(out.success(), "{out:?}");
        assert_eq!(out.stdout, "{\"a\": 1,\n \"b\": 'x'}\n");
    }
}
