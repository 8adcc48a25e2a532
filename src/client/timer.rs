//! Waiting for a paced arrival's due time more precisely than tokio's timer, whose wheel
//! ticks in whole milliseconds (a `sleep_until` wakes up to 1 ms late, which alone would
//! put the dispatch lag's p99 near 1 ms). One thread per pacer sleeps on a channel with a
//! timeout (the kernel's high-resolution timer, with the thread's timer slack cut to 1 µs on
//! Linux) and wakes the waiting task when the time comes; the task's wake-up from another
//! thread costs tens of microseconds. The thread ends when its pacer is dropped, even in
//! the middle of a long wait.

use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

/// Waits shorter than this are not worth a thread hop: they are spun on the runtime.
const SPIN: Duration = Duration::from_micros(20);

/// The precise-sleep thread of one pacer.
pub(super) struct PreciseTimer {
    requests: mpsc::Sender<(Instant, oneshot::Sender<()>)>,
}

impl PreciseTimer {
    /// Start the thread; `None` when the system cannot start one (the caller then uses
    /// tokio's timer).
    pub(super) fn start() -> Option<Self> {
        let (tx, rx) = mpsc::channel::<(Instant, oneshot::Sender<()>)>();
        std::thread::Builder::new()
            .name("pacer-timer".into())
            .spawn(move || serve(&rx))
            .ok()?;
        Some(PreciseTimer { requests: tx })
    }

    /// Wait until `due`: on the thread for all but the last microseconds, then yielding
    /// on the runtime. A dropped wait abandons its request (the thread moves on to the
    /// next one).
    pub(super) async fn sleep_until(&self, due: Instant) {
        if due.saturating_duration_since(Instant::now()) > SPIN {
            let (tx, rx) = oneshot::channel();
            if self.requests.send((due - SPIN, tx)).is_ok() {
                let _ = rx.await;
            } else {
                tokio::time::sleep_until(due.into()).await;
            }
        }
        while Instant::now() < due {
            tokio::task::yield_now().await;
        }
    }
}

/// The thread: one pending wake-up at a time, replaced by a newer request, ended when the
/// pacer drops its sender.
fn serve(rx: &mpsc::Receiver<(Instant, oneshot::Sender<()>)>) {
    slack_of_one_microsecond();
    let mut pending: Option<(Instant, oneshot::Sender<()>)> = None;
    loop {
        let Some((due, waiter)) = pending.take() else {
            match rx.recv() {
                Ok(next) => pending = Some(next),
                Err(_) => return,
            }
            continue;
        };
        let now = Instant::now();
        if now >= due {
            let _ = waiter.send(());
            continue;
        }
        match rx.recv_timeout(due - now) {
            Err(RecvTimeoutError::Timeout) => {
                let _ = waiter.send(());
            }
            Err(RecvTimeoutError::Disconnected) => return,
            // A newer wait: the pacer gave up on the older one.
            Ok(next) => pending = Some(next),
        }
    }
}

/// The kernel may defer a sleeping thread's wake-up by its timer slack (50 µs by default)
/// to batch wake-ups; this thread wants its wake-ups on time.
fn slack_of_one_microsecond() {
    #[cfg(target_os = "linux")]
    // SAFETY: PR_SET_TIMERSLACK takes a plain integer and changes only this thread's slack.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1000 as libc::c_ulong, 0, 0, 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn wakes_at_the_due_time_not_at_the_next_millisecond() {
        let timer = PreciseTimer::start().unwrap();
        let mut late = Vec::new();
        for i in 0..40u64 {
            let due = Instant::now() + Duration::from_micros(300 + 37 * i);
            timer.sleep_until(due).await;
            let now = Instant::now();
            assert!(now >= due);
            late.push(now - due);
        }
        late.sort_unstable();
        // tokio's wheel would be up to 1 ms late; the median here is well under that even
        // on a loaded machine.
        assert!(late[20] < Duration::from_micros(500), "{late:?}");
        // An abandoned wait does not hold up the next one.
        let far = Instant::now() + Duration::from_secs(30);
        let abandoned = tokio::time::timeout(Duration::from_millis(5), timer.sleep_until(far));
        assert!(abandoned.await.is_err());
        let due = Instant::now() + Duration::from_millis(2);
        timer.sleep_until(due).await;
        assert!(Instant::now() < due + Duration::from_millis(500));
    }
}
