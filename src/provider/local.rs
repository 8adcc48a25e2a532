//! The local provider: each instance is a process group on the orchestrating machine
//! (`sh -e -c "<commands>"` in a session and group of its own, the task env on top of ours),
//! its output streamed into the instance log. Stopping sends SIGTERM to the whole group (and
//! SIGCONT, so a stopped member acts on it), then SIGKILL after a grace period, then kills what left the group but carries the instance's
//! marker; dropping an unstopped instance kills the group; a forced exit kills it through the
//! shutdown registry; and if orchestrate itself dies (even by SIGKILL) the instance's
//! [`super::watchdog`] kills the whole tree. Teardown never waits on an output pipe that
//! something outside the group still holds.

use std::time::Duration;

use async_trait::async_trait;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::watch;

use super::group::{PUMP_DRAIN, group_shell};
use super::watchdog::{self, InstanceRecord, MARKER, Watchdog, kill_group};
use super::{ExitInfo, Instance, LaunchRequest, LogSink, Provider, ProviderError};
use crate::shutdown::{KillRegistration, Shutdown};

type Pump = tokio::task::JoinHandle<()>;

/// Wait for `pumps` until `within` has passed; the ones still reading are returned.
async fn drain(pumps: Vec<Pump>, within: Duration) -> Vec<Pump> {
    let deadline = tokio::time::Instant::now() + within;
    let mut left = Vec::new();
    for mut pump in pumps {
        if tokio::time::timeout_at(deadline, &mut pump).await.is_err() {
            left.push(pump);
        }
    }
    left
}

/// How long a stopped group gets between SIGTERM and SIGKILL.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(10);

/// Runs instances as local process groups.
pub struct LocalProvider {
    shutdown: Shutdown,
    grace: Duration,
}

impl LocalProvider {
    pub fn new(shutdown: Shutdown) -> Self {
        Self {
            shutdown,
            grace: DEFAULT_GRACE,
        }
    }

    /// Change the SIGTERM -> SIGKILL grace period.
    pub fn with_grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }
}

#[async_trait]
impl Provider for LocalProvider {
    fn name(&self) -> String {
        "local".to_string()
    }

    async fn launch(&self, request: LaunchRequest) -> Result<Box<dyn Instance>, ProviderError> {
        let script = request.commands.join("\n");
        let marker = InstanceRecord::marker_for(
            &request.run_id,
            &request.deployment,
            &request.role,
            request.index,
        );
        let mut env = request.env.clone();
        env.push((MARKER.to_string(), marker.clone()));
        let mut command = group_shell(&["-e", "-c", &script], &env);
        command.kill_on_drop(false);
        let what = format!("{}-{}", request.role, request.index);
        let mut child = command.spawn().map_err(|source| ProviderError::Spawn {
            what: what.clone(),
            source,
        })?;
        let pid = child.id().expect("a spawned child has a pid") as i32;
        let record = InstanceRecord {
            run: request.run_id.clone(),
            task: request.task.clone(),
            deployment: request.deployment.clone(),
            role: request.role.clone(),
            index: request.index,
            pgid: pid,
            watchdog: 0,
            owner: std::process::id(),
            marker: marker.clone(),
        };
        let watchdog = match Watchdog::start(record, &request.log) {
            Ok(watchdog) => watchdog,
            Err(source) => {
                kill_group(pid, libc::SIGKILL);
                return Err(ProviderError::Spawn {
                    what: format!("the watchdog of {what}"),
                    source,
                });
            }
        };
        let hook_marker = marker.clone();
        let registration =
            self.shutdown
                .register(format!("local process group {pid} ({what})"), move || {
                    kill_group(pid, libc::SIGKILL);
                    watchdog::kill_marked(&hook_marker);
                });
        request.log.line(&format!(
            "[orchestrate] started process group {pid}: sh -e -c {script:?}"
        ));

        let mut pumps = Vec::new();
        if let Some(out) = child.stdout.take() {
            pumps.push(tokio::spawn(pump(out, request.log.clone())));
        }
        if let Some(err) = child.stderr.take() {
            pumps.push(tokio::spawn(pump(err, request.log.clone())));
        }
        let (exit_tx, exit_rx) = watch::channel(None);
        let log = request.log.clone();
        let waiter = tokio::spawn(async move {
            let status = child.wait().await;
            let info = match status {
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
            // Let the pumps drain what the process wrote before it exited, but not wait on
            // pipes that a process it left behind still holds.
            let pumps = drain(pumps, PUMP_DRAIN).await;
            log.line(&format!(
                "[orchestrate] process group {pid} leader exited: {info}"
            ));
            let _ = exit_tx.send(Some(info));
            pumps
        });
        Ok(Box::new(LocalInstance {
            pid,
            port: request.port,
            marker,
            log: request.log,
            exit: exit_rx,
            waiter: Some(waiter),
            grace: self.grace,
            stopped: false,
            watchdog: Some(watchdog),
            _registration: registration,
        }))
    }

    async fn host_facts(&self) -> serde_json::Value {
        local_host_facts()
    }
}

/// Facts about this machine for the manifest.
pub fn local_host_facts() -> serde_json::Value {
    let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    let memory_kib = std::fs::read_to_string("/proc/meminfo").ok().and_then(|m| {
        m.lines()
            .find(|l| l.starts_with("MemTotal:"))
            .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
    });
    serde_json::json!({
        "hostname": hostname,
        "os": std::env::consts::OS,
        "arch": std::env::consts::ARCH,
        "kernel": kernel,
        "cpus": cpus,
        "memory_bytes": memory_kib.map(|k| k * 1024),
        "gpus": [],
    })
}

async fn pump(mut reader: impl AsyncRead + Unpin, log: LogSink) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        match reader.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => log.write(&buf[..n]),
        }
    }
}

fn group_alive(pgid: i32) -> bool {
    // SAFETY: signal 0 only checks for existence.
    unsafe { libc::killpg(pgid, 0) == 0 }
}

/// A running local process group.
pub struct LocalInstance {
    pid: i32,
    port: u16,
    /// The value of the instance's `ORCHESTRATE_INSTANCE` variable.
    marker: String,
    log: LogSink,
    exit: watch::Receiver<Option<ExitInfo>>,
    /// Resolves with the pumps still reading once the leader has exited.
    waiter: Option<tokio::task::JoinHandle<Vec<Pump>>>,
    grace: Duration,
    stopped: bool,
    watchdog: Option<Watchdog>,
    _registration: KillRegistration,
}

impl LocalInstance {
    /// The process group id (= the shell's pid).
    pub fn pgid(&self) -> i32 {
        self.pid
    }
}

#[async_trait]
impl Instance for LocalInstance {
    /// A process's host is this machine: both targets run `sh -c` here.
    async fn exec(&self, request: super::ExecRequest) -> Result<super::ExecOutput, ProviderError> {
        super::exec::run_local(request).await
    }

    fn describe(&self) -> String {
        format!("local process group {}", self.pid)
    }

    fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn log(&self) -> &LogSink {
        &self.log
    }

    async fn exited(&self) -> ExitInfo {
        let mut rx = self.exit.clone();
        loop {
            if let Some(info) = rx.borrow_and_update().clone() {
                return info;
            }
            if rx.changed().await.is_err() {
                return rx.borrow().clone().unwrap_or(ExitInfo {
                    code: None,
                    signal: None,
                });
            }
        }
    }

    fn exit_watch(&self) -> Option<crate::provider::ExitWatch> {
        Some(self.exit.clone())
    }

    fn facts(&self) -> serde_json::Value {
        serde_json::json!({
            "provider": "local",
            "pgid": self.pid,
            "port": self.port,
            "marker": self.marker,
        })
    }

    async fn stop(mut self: Box<Self>) -> Result<(), ProviderError> {
        self.stopped = true;
        kill_group(self.pid, libc::SIGTERM);
        // A stopped (SIGSTOP, Ctrl-Z) member acts on SIGTERM only once continued; without
        // this it would sit out the whole grace.
        kill_group(self.pid, libc::SIGCONT);
        let deadline = tokio::time::Instant::now() + self.grace;
        while group_alive(self.pid) && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        if group_alive(self.pid) {
            self.log.line(&format!(
                "[orchestrate] process group {} ignored SIGTERM for {:?}: SIGKILL",
                self.pid, self.grace
            ));
            kill_group(self.pid, libc::SIGKILL);
        }
        let pumps = match self.waiter.take() {
            Some(waiter) => waiter.await.unwrap_or_default(),
            None => Vec::new(),
        };
        // Reap any member that outlived the leader, then whatever left the group.
        while group_alive(self.pid) {
            kill_group(self.pid, libc::SIGKILL);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let escaped = watchdog::kill_marked(&self.marker);
        if escaped > 0 {
            self.log.line(&format!(
                "[orchestrate] killed {escaped} process(es) of {} that had left its group",
                self.pid
            ));
        }
        for pump in drain(pumps, PUMP_DRAIN).await {
            pump.abort();
        }
        if let Some(watchdog) = self.watchdog.take() {
            watchdog.disarm();
        }
        self.log.flush();
        Ok(())
    }
}

impl Drop for LocalInstance {
    fn drop(&mut self) {
        if !self.stopped {
            tracing::warn!(
                "process group {} dropped without stop: killing it",
                self.pid
            );
            kill_group(self.pid, libc::SIGKILL);
            watchdog::kill_marked(&self.marker);
            self.log.flush();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::deploy::Resources;

    fn request(commands: &[&str], log: LogSink) -> LaunchRequest {
        LaunchRequest {
            run_id: "r".into(),
            task: "t".into(),
            deployment: "d1".into(),
            role: "server".into(),
            index: 0,
            place: crate::provider::ProcessPlace::default(),
            image: None,
            commands: commands.iter().map(|s| s.to_string()).collect(),
            env: vec![("GREETING".into(), "hello from env".into())],
            port: 1,
            volumes: vec![],
            resources: Resources::default(),
            log,
            container: Default::default(),
        }
    }

    #[tokio::test]
    async fn runs_commands_with_env_and_captures_output_and_exit() {
        let provider = LocalProvider::new(Shutdown::new());
        let log = LogSink::memory();
        let instance = provider
            .launch(request(
                &["echo \"$GREETING\"", "echo err >&2", "exit 3"],
                log.clone(),
            ))
            .await
            .unwrap();
        let exit = tokio::time::timeout(Duration::from_secs(5), instance.exited())
            .await
            .unwrap();
        assert_eq!(exit.code, Some(3));
        let tail = log.tail(40).join("\n");
        assert!(
            tail.contains("hello from env") && tail.contains("err"),
            "{tail}"
        );
        instance.stop().await.unwrap();
    }

    #[tokio::test]
    async fn stop_kills_the_whole_group_including_grandchildren() {
        let shutdown = Shutdown::new();
        let provider = LocalProvider::new(shutdown.clone()).with_grace(Duration::from_millis(500));
        let instance = provider
            .launch(request(
                &["sleep 300 & sleep 300 & wait"],
                LogSink::memory(),
            ))
            .await
            .unwrap();
        let pgid = instance.facts()["pgid"].as_i64().unwrap() as i32;
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(group_alive(pgid));
        assert_eq!(shutdown.live(), 1);
        instance.stop().await.unwrap();
        assert!(!group_alive(pgid), "group {pgid} survived stop");
        assert_eq!(shutdown.live(), 0, "stop unregisters the emergency kill");
    }

    #[tokio::test]
    async fn stop_does_not_wait_on_pipes_held_by_a_child_that_left_the_group() {
        let provider = LocalProvider::new(Shutdown::new()).with_grace(Duration::from_millis(500));
        let mut req = request(&["setsid sleep 299 &", "sleep 300"], LogSink::memory());
        req.run_id = "stop-pipes".into();
        let instance = provider.launch(req).await.unwrap();
        let marker = instance.facts()["marker"].as_str().unwrap().to_string();
        tokio::time::sleep(Duration::from_millis(300)).await;
        let stopped = tokio::time::timeout(Duration::from_secs(6), instance.stop()).await;
        let left = watchdog::kill_marked(&marker);
        assert!(stopped.is_ok(), "stop hung on the escaped child's pipes");
        assert_eq!(
            left, 0,
            "stop leaves nothing that carries the instance's marker"
        );
    }

    #[tokio::test]
    async fn stop_continues_a_stopped_group_so_it_ends_on_sigterm_not_after_the_grace() {
        let provider = LocalProvider::new(Shutdown::new()).with_grace(Duration::from_secs(20));
        let log = LogSink::memory();
        let instance = provider
            .launch(request(
                &["trap 'echo got SIGTERM; exit 0' TERM", "sleep 300 & wait"],
                log.clone(),
            ))
            .await
            .unwrap();
        let pgid = instance.facts()["pgid"].as_i64().unwrap() as i32;
        tokio::time::sleep(Duration::from_millis(200)).await;
        kill_group(pgid, libc::SIGSTOP);
        let started = std::time::Instant::now();
        instance.stop().await.unwrap();
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "stop of a stopped group took {:?} (grace 20 s)",
            started.elapsed()
        );
        assert!(!group_alive(pgid), "group {pgid} survived stop");
        assert!(log.tail(10).join("\n").contains("got SIGTERM"));
    }

    #[tokio::test]
    async fn dropping_an_instance_kills_its_group() {
        let provider = LocalProvider::new(Shutdown::new());
        let instance = provider
            .launch(request(&["sleep 300"], LogSink::memory()))
            .await
            .unwrap();
        let pgid = instance.facts()["pgid"].as_i64().unwrap() as i32;
        drop(instance);
        for _ in 0..100 {
            if !group_alive(pgid) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("group {pgid} survived drop");
    }

    #[tokio::test]
    async fn emergency_kill_reaches_the_group() {
        let shutdown = Shutdown::new();
        let provider = LocalProvider::new(shutdown.clone());
        let instance = provider
            .launch(request(&["sleep 300"], LogSink::memory()))
            .await
            .unwrap();
        shutdown.kill_all();
        let exit = tokio::time::timeout(Duration::from_secs(5), instance.exited())
            .await
            .unwrap();
        assert_eq!(exit.signal, Some(libc::SIGKILL));
        instance.stop().await.unwrap();
    }
}
