//! The ssh provider: task instances as process groups on a remote host, with the local
//! provider's guarantees over SSH. Each instance runs under a small remote wrapper that
//! starts the commands with `setsid` (own process group, env applied, output streamed back
//! into the local [`LogSink`]) and a watchdog that kills the whole group when the wrapper's
//! stdin closes: on `stop` (we close it), on `Drop` (we close it and send a kill), on a forced
//! exit (the registered emergency kill), and when the SSH connection drops (sshd closes it).
//!
//! Owns: launching and stopping remote processes. Does not own: sessions (`crate::ssh`), the
//! hosts file, or remote Docker (the docker provider on a bollard client through
//! [`crate::ssh::Session::forward`]).

use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::watch;

use super::{ExitInfo, Instance, LaunchRequest, LogSink, Provider, ProviderError};
use crate::shutdown::{KillRegistration, Shutdown};
use crate::ssh::{CommandEvent, Session, StdinCloser, Tunnel, quote};

/// How the orchestrating machine reaches servers on the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reach {
    /// `http://<host address>:<port>`: the port is reachable from here.
    Direct,
    /// Through an SSH tunnel to the host's `127.0.0.1:<port>`, else `<host address>:<port>`
    /// (firewalled hosts).
    Tunnel,
}

/// Runs instances on one host over one session.
pub struct SshProvider {
    session: Session,
    shutdown: Shutdown,
    reach: Reach,
    /// Time between SIGTERM and SIGKILL on stop.
    grace: Duration,
    /// Remote directory for per-instance state (`<root>/<run>/<task>.<role>-<index>.<random>/pgid`).
    root: String,
}

impl SshProvider {
    pub fn new(session: Session, shutdown: Shutdown, reach: Reach) -> Self {
        Self {
            session,
            shutdown,
            reach,
            grace: Duration::from_secs(10),
            root: "/tmp/orchestrate".to_string(),
        }
    }

    /// Change the SIGTERM -> SIGKILL grace period (default 10 s).
    pub fn with_grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }
}

/// The remote wrapper. Arguments: state dir, grace seconds, then `env` arguments
/// (`K=V`... `sh -c CMDS`). fd 3 keeps the channel's stdin for the watchdog (background
/// lists get /dev/null as stdin in a non-interactive shell). Once the job runs, the wrapper's
/// own output goes to /dev/null: a dropped connection must not SIGPIPE it before it cleans up.
const WRAPPER: &str = r#"dir=$1; grace=$2; shift 2
mkdir -p "$dir" || exit 125
rm -f "$dir/pgid"
exec 3<&0
setsid sh -c 'echo $$ > "$0/pgid"; exec env "$@"' "$dir" "$@" </dev/null 3<&- &
job=$!
n=0
while [ ! -s "$dir/pgid" ] && [ $n -lt 200 ]; do sleep 0.05; n=$((n+1)); done
pg=$(cat "$dir/pgid" 2>/dev/null)
( cat <&3 >/dev/null 2>&1
  if [ -f "$dir/pgid" ] && [ -n "$pg" ]; then
    kill -s TERM -- "-$pg" 2>/dev/null
    i=0; while [ $i -lt "$grace" ] && kill -s 0 -- "-$pg" 2>/dev/null; do sleep 1; i=$((i+1)); done
    kill -s KILL -- "-$pg" 2>/dev/null
  fi ) >/dev/null 2>&1 &
exec 3<&- >/dev/null 2>&1
wait $job; status=$?
rm -f "$dir/pgid"
rmdir "$dir" "${dir%/*}" 2>/dev/null
exit $status"#;

/// Kill the group recorded in `dir` with `signal`.
fn kill_command(dir: &str, signal: &str) -> String {
    format!(
        "pg=$(cat {dir}/pgid 2>/dev/null) && [ -n \"$pg\" ] && kill -s {signal} -- \"-$pg\"",
        dir = quote(dir)
    )
}

fn launch_command(dir: &str, grace: Duration, request: &LaunchRequest) -> String {
    let mut script = String::from("set -e\n");
    script.push_str(&request.commands.join("\n"));
    let mut args = vec![
        quote(dir),
        grace.as_secs().max(1).to_string(),
        quote(&format!("ORCHESTRATE_RUN_ID={}", request.run_id)),
    ];
    args.push(quote(&format!("PORT={}", request.port)));
    for (name, value) in &request.env {
        args.push(quote(&format!("{name}={value}")));
    }
    args.extend(["sh".to_string(), "-c".to_string(), quote(&script)]);
    format!(
        "sh -c {} orchestrate-remote {}",
        quote(WRAPPER),
        args.join(" ")
    )
}

#[async_trait]
impl Provider for SshProvider {
    fn name(&self) -> String {
        format!("ssh:{}", self.session.host().name)
    }

    async fn launch(&self, request: LaunchRequest) -> Result<Box<dyn Instance>, ProviderError> {
        // Run ids are only unique per task and results dir: the task and a random suffix keep
        // instances of runs started in the same second apart.
        let dir = format!(
            "{}/{}/{}.{}-{}.{:08x}",
            self.root,
            request.run_id,
            request.task,
            request.role,
            request.index,
            rand::random::<u32>()
        );
        let command = launch_command(&dir, self.grace, &request);
        let host = self.session.host().clone();
        let tunnel = match self.reach {
            Reach::Direct => None,
            Reach::Tunnel => Some(
                self.session
                    .forward(super::reach::tunnel_target(&host.address, request.port))
                    .await
                    .map_err(ssh_error("open a tunnel to the server port", &self.session))?,
            ),
        };
        let base_url = match &tunnel {
            Some(t) => format!("http://{}", t.local_addr()),
            None => format!("http://{}:{}", host.address, request.port),
        };
        let mut remote = self
            .session
            .exec(&command)
            .await
            .map_err(ssh_error("start the server", &self.session))?;
        let stdin = remote.stdin_closer();
        let (exit_tx, exit_rx) = watch::channel(None);
        let log = request.log.clone();
        let target = host.describe();
        tokio::spawn(async move {
            let info = loop {
                match remote.next().await {
                    Some(CommandEvent::Stdout(b) | CommandEvent::Stderr(b)) => log.write(&b),
                    Some(CommandEvent::Exit(exit)) => break exit_info(exit.code, exit.signal),
                    Some(CommandEvent::Failed(e)) => {
                        log.line(&format!("[orchestrate] {e}"));
                        break ExitInfo {
                            code: None,
                            signal: None,
                        };
                    }
                    None => {
                        log.line(&format!("[orchestrate] lost the ssh session to {target}"));
                        break ExitInfo {
                            code: None,
                            signal: None,
                        };
                    }
                }
            };
            log.flush();
            let _ = exit_tx.send(Some(info));
        });
        let kill_session = self.session.clone();
        let kill_dir = dir.clone();
        let registration = self.shutdown.register(
            format!("remote process group on {} ({dir})", host.name),
            move || {
                kill_session.run_blocking(&kill_command(&kill_dir, "KILL"), Duration::from_secs(3));
            },
        );
        Ok(Box::new(SshInstance {
            session: self.session.clone(),
            dir,
            base_url,
            log: request.log,
            exit: exit_rx,
            stdin,
            grace: self.grace,
            _tunnel: tunnel,
            _registration: registration,
            stopped: false,
        }))
    }

    async fn host_facts(&self) -> serde_json::Value {
        let host = self.session.host();
        let system = self
            .session
            .run("uname -srm; nproc")
            .await
            .map(|o| o.stdout)
            .unwrap_or_default();
        let gpus = self
            .session
            .run(crate::ssh::GPU_QUERY)
            .await
            .map(|o| crate::ssh::parse_gpus(&o.stdout))
            .unwrap_or_default();
        let mut lines = system.lines();
        serde_json::json!({
            "host": host.name,
            "address": host.address,
            "user": host.user,
            "os": lines.next().unwrap_or_default(),
            "cpus": lines.next().and_then(|n| n.trim().parse::<u32>().ok()),
            "gpus": gpus,
            "gpus_declared": host.gpus,
            "labels": host.labels,
        })
    }
}

/// Process groups of earlier runs still alive on the host (their wrapper never finished:
/// `orchestrate` was killed with SIGKILL while the connection stayed up, or the host lost
/// it). Returns the state dirs (`<root>/<run>/<task>.<role>-<i>.<random>`) with their group ids.
pub async fn leftovers(session: &Session) -> Result<Vec<(String, i32)>, ProviderError> {
    // A group counts only if its leader still carries our run id (group ids get reused).
    let script = "for f in /tmp/orchestrate/*/*/pgid; do [ -f \"$f\" ] || continue; \
                  pg=$(cat \"$f\" 2>/dev/null); [ -n \"$pg\" ] || continue; \
                  d=${f%/pgid}; run=${d%/*}; run=${run##*/}; \
                  if kill -s 0 -- \"-$pg\" 2>/dev/null && tr '\\0' '\\n' < /proc/$pg/environ 2>/dev/null \
                  | grep -qxF \"ORCHESTRATE_RUN_ID=$run\"; then echo \"$pg $d\"; fi; done";
    let out = session
        .run_ok(&format!("sh -c {}", quote(script)))
        .await
        .map_err(ssh_error("list leftover processes", session))?;
    Ok(out
        .lines()
        .filter_map(|l| {
            let (pg, dir) = l.split_once(' ')?;
            Some((dir.to_string(), pg.parse().ok()?))
        })
        .collect())
}

/// Kill the leftover process groups on the host (`orchestrate clean --host H`), of one run
/// or of every run; returns what was killed.
pub async fn clean(
    session: &Session,
    run: Option<&str>,
) -> Result<Vec<(String, i32)>, ProviderError> {
    let found: Vec<(String, i32)> = leftovers(session)
        .await?
        .into_iter()
        .filter(|(dir, _)| run.is_none_or(|r| dir.split('/').any(|part| part == r)))
        .collect();
    for (dir, _) in &found {
        let _ = session.run(&kill_command(dir, "KILL")).await;
        let _ = session.run(&format!("rm -f {}/pgid", quote(dir))).await;
    }
    Ok(found)
}

/// Exit codes above 128 from the shell mean "killed by signal (code - 128)".
fn exit_info(code: i32, signal: Option<String>) -> ExitInfo {
    match (code, signal) {
        (_, Some(name)) => ExitInfo {
            code: None,
            signal: signal_number(&name),
        },
        (129..=192, None) => ExitInfo {
            code: None,
            signal: Some(code - 128),
        },
        (code, None) => ExitInfo {
            code: Some(code),
            signal: None,
        },
    }
}

fn signal_number(name: &str) -> Option<i32> {
    Some(match name {
        "HUP" => libc::SIGHUP,
        "INT" => libc::SIGINT,
        "KILL" => libc::SIGKILL,
        "TERM" => libc::SIGTERM,
        "PIPE" => libc::SIGPIPE,
        "SEGV" => libc::SIGSEGV,
        "ABRT" => libc::SIGABRT,
        _ => return None,
    })
}

/// One remote process group.
struct SshInstance {
    session: Session,
    dir: String,
    base_url: String,
    log: LogSink,
    exit: watch::Receiver<Option<ExitInfo>>,
    stdin: StdinCloser,
    grace: Duration,
    _tunnel: Option<Tunnel>,
    _registration: KillRegistration,
    stopped: bool,
}

/// The wrapper's command line for an exec next to an instance (its state in `dir`).
fn exec_command(dir: &str, request: &super::ExecRequest) -> String {
    let mut args = vec![quote(dir), "1".to_string()];
    for (name, value) in &request.env {
        args.push(quote(&format!("{name}={value}")));
    }
    args.extend(["sh".to_string(), "-c".to_string(), quote(&request.command)]);
    format!(
        "sh -c {} orchestrate-exec {}",
        quote(WRAPPER),
        args.join(" ")
    )
}

/// Kills an exec's remote group unless it ended: EOF on the wrapper's stdin (its watchdog
/// kills the group) and an explicit SIGKILL.
struct ExecGuard {
    session: Session,
    dir: String,
    stdin: StdinCloser,
    done: bool,
}

impl Drop for ExecGuard {
    fn drop(&mut self) {
        self.stdin.close();
        if !self.done {
            self.session
                .spawn_detached(&kill_command(&self.dir, "KILL"));
        }
    }
}

#[async_trait]
impl Instance for SshInstance {
    /// Both targets run on the instance's host, under the same wrapper as the instance
    /// (own process group, killed when the future is dropped or the connection drops).
    async fn exec(&self, request: super::ExecRequest) -> Result<super::ExecOutput, ProviderError> {
        let dir = format!("{}.exec-{:08x}", self.dir, rand::random::<u32>());
        let mut remote = self
            .session
            .exec(&exec_command(&dir, &request))
            .await
            .map_err(ssh_error("run a command", &self.session))?;
        let mut guard = ExecGuard {
            session: self.session.clone(),
            dir,
            stdin: remote.stdin_closer(),
            done: false,
        };
        let capture = super::exec::Capture::default();
        let exit = loop {
            match remote.next().await {
                Some(CommandEvent::Stdout(b)) => capture.push(false, &b, &request.log),
                Some(CommandEvent::Stderr(b)) => capture.push(true, &b, &request.log),
                Some(CommandEvent::Exit(exit)) => break exit_info(exit.code, exit.signal),
                Some(CommandEvent::Failed(e)) => {
                    return Err(ssh_error("run a command", &self.session)(e));
                }
                None => {
                    return Err(ProviderError::SessionLost {
                        host: self.session.host().describe(),
                    });
                }
            }
        };
        guard.done = true;
        Ok(capture.finish(exit))
    }

    fn describe(&self) -> String {
        format!(
            "remote process group on {} ({})",
            self.session.host().name,
            self.dir
        )
    }

    fn base_url(&self) -> String {
        self.base_url.clone()
    }

    fn log(&self) -> &LogSink {
        &self.log
    }

    async fn exited(&self) -> ExitInfo {
        let mut exit = self.exit.clone();
        match exit.wait_for(Option::is_some).await {
            Ok(info) => info.clone().unwrap_or(ExitInfo {
                code: None,
                signal: None,
            }),
            Err(_) => ExitInfo {
                code: None,
                signal: None,
            },
        }
    }

    fn facts(&self) -> serde_json::Value {
        serde_json::json!({
            "host": self.session.host().name,
            "state_dir": self.dir,
        })
    }

    async fn stop(mut self: Box<Self>) -> Result<(), ProviderError> {
        self.stopped = true;
        if self.exit.borrow().is_some() {
            return Ok(());
        }
        // EOF on the wrapper's stdin: its watchdog sends SIGTERM, then SIGKILL after the grace.
        self.stdin.close();
        let _ = self.session.run(&kill_command(&self.dir, "TERM")).await;
        let limit = self.grace + Duration::from_secs(5);
        if tokio::time::timeout(limit, self.exited()).await.is_ok() {
            return Ok(());
        }
        self.session
            .run_ok(&kill_command(&self.dir, "KILL"))
            .await
            .map(drop)
            .map_err(ssh_error("kill the server", &self.session))
    }
}

impl Drop for SshInstance {
    fn drop(&mut self) {
        if self.stopped || self.exit.borrow().is_some() {
            return;
        }
        tracing::warn!("{} dropped without stop: killing it", self.describe());
        self.stdin.close();
        self.session
            .spawn_detached(&kill_command(&self.dir, "KILL"));
    }
}

/// Wrap an SSH failure of `action` on the session's host.
fn ssh_error(
    action: &'static str,
    session: &Session,
) -> impl FnOnce(crate::ssh::SshError) -> ProviderError {
    let host = session.host().describe();
    move |source| ProviderError::Ssh {
        action: action.to_string(),
        host,
        source: Box::new(source),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_exit_codes_above_128_are_signals() {
        assert_eq!(exit_info(0, None).code, Some(0));
        assert_eq!(exit_info(3, None).code, Some(3));
        assert_eq!(exit_info(143, None).signal, Some(libc::SIGTERM));
        assert_eq!(
            exit_info(0, Some("KILL".into())).signal,
            Some(libc::SIGKILL)
        );
    }
}
