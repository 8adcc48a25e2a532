//! A shell in a process group of its own on this machine, as local instances and local
//! `exec`s both run: how it is started, and how long its output pipes are read once it is
//! gone.

use std::process::Stdio;
use std::time::Duration;

use tokio::process::Command;

/// How long output pipes may still be read once the process that wrote them is gone (or its
/// group killed): whatever holds them after that is not waited for.
pub(crate) const PUMP_DRAIN: Duration = Duration::from_secs(1);

/// `sh ARGS` in a session and process group of its own, with `env` added, stdin closed,
/// stdout and stderr piped, and SIGKILLed by the kernel if orchestrate dies (the shell
/// itself; what it forked is the watchdog's). Launches and `exec`s share it.
pub(crate) fn group_shell(args: &[&str], env: &[(String, String)]) -> Command {
    let mut command = Command::new("sh");
    command
        .args(args)
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // SAFETY: setsid and prctl are async-signal-safe; the first makes the shell the leader
    // of a new session and group (pgid = its pid), the second asks the kernel to SIGKILL it
    // when its parent (orchestrate) dies.
    unsafe {
        command.pre_exec(|| {
            if libc::setsid() < 0 {
                return Err(std::io::Error::last_os_error());
            }
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    command
}
