//! One watcher per running job: polls Slurm (every [`JOB_POLL`]) while any step of the job
//! still listens, and announces the job's end (`JobState=... Reason=...`) as soon as Slurm
//! reports it. A job that Slurm ends (time limit, node failure, `scancel` from outside) kills
//! its tasks at once, but `srun` may linger for up to Slurm's KillWait (30 s by default)
//! before it exits; without this the deployment would send a whole point to dead servers.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use tokio::sync::watch;

use super::allocation::end_state;
use super::cli::SlurmHost;

/// How often a running job is asked after.
pub const JOB_POLL: Duration = Duration::from_secs(2);

/// The end of one job: `None` while it runs.
pub type JobEnd = watch::Receiver<Option<String>>;

fn watchers() -> &'static Mutex<HashMap<String, watch::Sender<Option<String>>>> {
    static WATCHERS: OnceLock<Mutex<HashMap<String, watch::Sender<Option<String>>>>> =
        OnceLock::new();
    WATCHERS.get_or_init(Default::default)
}

/// The end of `job` of Slurm cluster `cluster` (asked of Slurm on `host`), from its one
/// watcher (started on the first call, on the current runtime; two clusters may both have a
/// job 1). The watcher stops once no receiver is left or the job has ended.
pub fn job_end(host: &SlurmHost, cluster: &str, job: &str) -> JobEnd {
    let key = format!("{cluster}/{job}");
    let mut map = watchers().lock().unwrap_or_else(|e| e.into_inner());
    if let Some(tx) = map.get(&key)
        && !tx.is_closed()
    {
        return tx.subscribe();
    }
    let (tx, rx) = watch::channel(None);
    map.insert(key.clone(), tx.clone());
    let job = job.to_string();
    let host = host.clone();
    tokio::spawn(async move {
        loop {
            tokio::select! {
                () = tx.closed() => break,
                () = tokio::time::sleep(JOB_POLL) => {}
            }
            if let Some(state) = end_state(&host, &job).await {
                let _ = tx.send(Some(state));
                break;
            }
        }
        let mut map = watchers().lock().unwrap_or_else(|e| e.into_inner());
        if map.get(&key).is_some_and(|t| t.same_channel(&tx)) {
            map.remove(&key);
        }
    });
    rx
}
