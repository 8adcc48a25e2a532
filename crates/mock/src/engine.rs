//! The wall-clock engine: one dedicated thread that steps the `Scheduler` like a
//! continuous-batching server (plan a step, sleep until its end on an absolute schedule,
//! publish every sequence's progress), so 10,000 streams cost one timer, not 10,000.
//! Per-sequence progress is published lock-free in a `SeqState` (counter + waker) that the
//! response body reads; metrics are updated once per step. Not here: HTTP or rendering.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use futures_util::task::AtomicWaker;

use crate::error::MockError;
use crate::latency::LatencyModel;
use crate::prom::Metrics;
use crate::scheduler::{Progress, Scheduler};

const STARTED: u64 = 1 << 32;
const FINISHED: u64 = 1 << 33;
const ABORTED: u64 = 1 << 34;

/// What the engine has done for one sequence, shared with its response body.
#[derive(Debug, Default)]
pub(crate) struct SeqState {
    /// Low 32 bits: tokens generated; then the STARTED / FINISHED / ABORTED flags.
    progress: AtomicU64,
    /// Set by the response side when nobody waits for the output any more.
    cancelled: AtomicBool,
    waker: AtomicWaker,
}

/// A consistent read of a `SeqState`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Snapshot {
    pub generated: u32,
    /// The first prefill chunk ran (a chat stream may send its role chunk).
    pub started: bool,
    pub finished: bool,
    /// The engine stopped before the sequence finished.
    pub aborted: bool,
}

impl SeqState {
    /// Register the current task and read the progress (register first: no lost wake-up).
    pub(crate) fn poll_snapshot(&self, cx: &mut Context<'_>) -> Snapshot {
        self.waker.register(cx.waker());
        self.snapshot()
    }

    fn snapshot(&self) -> Snapshot {
        let v = self.progress.load(Ordering::Acquire);
        Snapshot {
            generated: v as u32,
            started: v & STARTED != 0,
            finished: v & FINISHED != 0,
            aborted: v & ABORTED != 0,
        }
    }

    /// Ready once the sequence finished or was aborted.
    pub(crate) fn poll_done(&self, cx: &mut Context<'_>) -> Poll<Snapshot> {
        let s = self.poll_snapshot(cx);
        if s.finished || s.aborted {
            Poll::Ready(s)
        } else {
            Poll::Pending
        }
    }

    /// The output is no longer wanted; the engine drops the sequence at its next step.
    pub(crate) fn cancel(&self) {
        self.cancelled.store(true, Ordering::Relaxed);
    }

    fn publish(&self, p: Progress, wake: bool) {
        // Only scheduled sequences are reported, so the prefill has started.
        let mut v = u64::from(p.generated) | STARTED;
        if p.finished {
            v |= FINISHED;
        }
        self.progress.store(v, Ordering::Release);
        if wake {
            self.waker.wake();
        }
    }

    /// Publish progress by hand (tests of the bodies, without an engine).
    #[cfg(test)]
    pub(crate) fn set(&self, generated: u32, finished: bool) {
        self.publish(
            Progress {
                prefill_started: true,
                new_token: true,
                generated,
                finished,
            },
            true,
        );
    }

    /// Whether the response side gave up on the sequence.
    #[cfg(test)]
    pub(crate) fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::Relaxed)
    }

    fn abort(&self) {
        self.progress.fetch_or(ABORTED, Ordering::AcqRel);
        self.waker.wake();
    }
}

/// A request handed to the engine.
#[derive(Debug)]
pub(crate) struct Submission {
    pub state: Arc<SeqState>,
    pub prompt_tokens: u32,
    /// Tokens to generate (>= 1).
    pub target: u32,
    /// The request's max_tokens: finishing at it is "length", earlier "stop".
    pub max_tokens: u32,
    /// Whether the body streams (wake at chunk boundaries) or waits for the end.
    pub stream: bool,
    pub arrival: Instant,
    /// Told whether the sequence finished (`true`) or was dropped (cancelled, aborted).
    pub on_finish: Option<FinishHook>,
}

/// A callback for the end of a sequence, called exactly once: `true` when the engine finished
/// it, `false` when it was dropped unfinished (client gone, engine stopped).
pub(crate) struct FinishHook(Option<Box<dyn FnOnce(bool) + Send>>);

impl FinishHook {
    pub(crate) fn new(f: impl FnOnce(bool) + Send + 'static) -> Self {
        Self(Some(Box::new(f)))
    }

    fn fire(&mut self, finished: bool) {
        if let Some(f) = self.0.take() {
            f(finished);
        }
    }
}

impl Drop for FinishHook {
    fn drop(&mut self) {
        self.fire(false);
    }
}

impl std::fmt::Debug for FinishHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FinishHook")
    }
}

/// The engine's own view of a sequence.
#[derive(Debug)]
struct EngineSeq {
    sub: Submission,
    last_token: Option<Instant>,
}

/// Handle to the engine thread.
#[derive(Debug)]
pub(crate) struct Engine {
    tx: Mutex<Option<Sender<Submission>>>,
    stop: Arc<AtomicBool>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

/// How the engine runs.
#[derive(Debug, Clone)]
pub(crate) struct EngineSettings {
    pub latency: LatencyModel,
    pub speed: f64,
    pub tokens_per_chunk: u32,
}

impl Engine {
    pub(crate) fn start(
        settings: EngineSettings,
        metrics: Arc<Metrics>,
    ) -> Result<Self, MockError> {
        let (tx, rx) = mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let thread = std::thread::Builder::new()
            .name("mock-engine".into())
            .spawn(move || run(rx, &stop2, &settings, &metrics))
            .map_err(MockError::Engine)?;
        Ok(Self {
            tx: Mutex::new(Some(tx)),
            stop,
            thread: Mutex::new(Some(thread)),
        })
    }

    /// Queue a request; if the engine has stopped, the sequence is aborted at once.
    pub(crate) fn submit(&self, sub: Submission) {
        let tx = self.tx.lock().unwrap_or_else(|p| p.into_inner()).clone();
        match tx {
            Some(tx) => {
                if let Err(mpsc::SendError(sub)) = tx.send(sub) {
                    sub.state.abort();
                }
            }
            None => sub.state.abort(),
        }
    }

    /// Stop the thread (it aborts what is left) and wait for it. Blocks for at most about
    /// one step.
    pub(crate) fn shutdown(&self) {
        self.stop.store(true, Ordering::Relaxed);
        self.tx.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(t) = self.thread.lock().unwrap_or_else(|p| p.into_inner()).take() {
            let _ = t.join();
        }
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn run(rx: Receiver<Submission>, stop: &AtomicBool, s: &EngineSettings, metrics: &Metrics) {
    let mut sched: Scheduler<EngineSeq> = Scheduler::new(s.latency.clone());
    let k = s.tokens_per_chunk.max(1);
    let mut next_start: Option<Instant> = None;
    let push = |sched: &mut Scheduler<EngineSeq>, sub: Submission| {
        let (prompt, target) = (sub.prompt_tokens, sub.target);
        sched.push(
            EngineSeq {
                sub,
                last_token: None,
            },
            prompt,
            target,
        );
    };
    while !stop.load(Ordering::Relaxed) {
        if sched.is_idle() {
            // The usage before the count: a reader that sees no request running sees none held.
            metrics.kv_usage_ppm.store(0, Ordering::Release);
            metrics.running.store(0, Ordering::Release);
            metrics.waiting.store(0, Ordering::Relaxed);
            match rx.recv_timeout(Duration::from_millis(50)) {
                Ok(sub) => push(&mut sched, sub),
                Err(RecvTimeoutError::Timeout) => continue,
                Err(RecvTimeoutError::Disconnected) => break,
            }
            next_start = None;
        }
        while let Ok(sub) = rx.try_recv() {
            push(&mut sched, sub);
        }
        sched.retain(|seq| !seq.sub.state.cancelled.load(Ordering::Relaxed));
        let Some(plan) = sched.plan() else {
            continue;
        };
        metrics
            .running
            .store(sched.running() as u64, Ordering::Relaxed);
        metrics
            .waiting
            .store(sched.waiting() as u64, Ordering::Relaxed);
        let slots = u64::from(s.latency.max_batch.max(1));
        metrics.kv_usage_ppm.store(
            (sched.running() as u64 * 1_000_000 / slots).min(1_000_000),
            Ordering::Relaxed,
        );
        let step = Duration::from_secs_f64(plan.ms / s.speed / 1000.0);
        let now = Instant::now();
        // Keep an absolute schedule while busy (no drift from wake-up latency); start over
        // from now after idling or when more than a step behind.
        let start = match next_start {
            Some(t) if now.saturating_duration_since(t) < step => t,
            _ => now,
        };
        let deadline = start + step;
        let wait = deadline.saturating_duration_since(Instant::now());
        if !wait.is_zero() {
            std::thread::sleep(wait);
        }
        let done = Instant::now();
        let add = |a: &AtomicU64, v: u64| a.fetch_add(v, Ordering::Relaxed);
        add(&metrics.prompt_tokens, u64::from(plan.prefill_tokens));
        // Counters move before the progress is published, so a client that saw its last
        // token never reads a /metrics that misses it.
        {
            let mut h = metrics.histograms();
            sched.complete(|seq, p| {
                let sub = &seq.sub;
                if p.prefill_started {
                    h.queue
                        .observe(start.saturating_duration_since(sub.arrival).as_secs_f64());
                }
                if p.new_token {
                    add(&metrics.generation_tokens, 1);
                    match seq.last_token {
                        None => h.ttft.observe((done - sub.arrival).as_secs_f64()),
                        Some(t) => h.itl.observe((done - t).as_secs_f64()),
                    }
                    seq.last_token = Some(done);
                }
                if p.finished {
                    h.e2e.observe((done - sub.arrival).as_secs_f64());
                    if p.generated >= sub.max_tokens {
                        add(&metrics.success_length, 1);
                    } else {
                        add(&metrics.success_stop, 1);
                    }
                }
                let wake = if sub.stream {
                    p.finished || p.prefill_started || (p.new_token && (p.generated - 1) % k == 0)
                } else {
                    p.finished
                };
                sub.state.publish(p, wake);
                if p.finished
                    && let Some(hook) = seq.sub.on_finish.as_mut()
                {
                    hook.fire(true);
                }
            });
        }
        metrics
            .running
            .store(sched.running() as u64, Ordering::Relaxed);
        next_start = Some(deadline);
    }
    // Stopped: whoever still waits gets an abort instead of hanging.
    sched.retain(|seq| {
        seq.sub.state.abort();
        false
    });
    while let Ok(sub) = rx.try_recv() {
        sub.state.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::latency::Curve;
    use std::future::poll_fn;

    fn engine(step_ms: f64, max_batch: u32) -> (Engine, Arc<Metrics>) {
        engine_at(step_ms, max_batch, 1.0)
    }

    fn engine_at(step_ms: f64, max_batch: u32, speed: f64) -> (Engine, Arc<Metrics>) {
        let metrics = Arc::new(Metrics::default());
        let e = Engine::start(
            EngineSettings {
                latency: LatencyModel {
                    decode: Curve::constant(step_ms),
                    prefill: Curve::constant(0.0),
                    max_batch,
                    max_num_batched_tokens: 1 << 20,
                },
                speed,
                tokens_per_chunk: 1,
            },
            metrics.clone(),
        )
        .unwrap();
        (e, metrics)
    }

    fn submit(e: &Engine, target: u32) -> Arc<SeqState> {
        let state = Arc::new(SeqState::default());
        e.submit(Submission {
            state: state.clone(),
            prompt_tokens: 3,
            target,
            max_tokens: target,
            stream: false,
            arrival: Instant::now(),
            on_finish: None,
        });
        state
    }

    #[tokio::test]
    async fn runs_sequences_to_completion_on_the_step_clock() {
        let (e, metrics) = engine(5.0, 8);
        let t0 = Instant::now();
        let a = submit(&e, 10);
        let s = poll_fn(|cx| a.poll_done(cx)).await;
        let took = t0.elapsed();
        assert!(s.finished && s.generated == 10, "{s:?}");
        assert!(took >= Duration::from_millis(50), "{took:?}");
        assert!(took < Duration::from_millis(500), "{took:?}");
        assert_eq!(metrics.generation_tokens.load(Ordering::Relaxed), 10);
        assert_eq!(metrics.success_length.load(Ordering::Relaxed), 1);
        assert_eq!(metrics.histograms().itl.count(), 9);
        e.shutdown();
    }

    #[tokio::test]
    async fn speed_divides_step_time() {
        // 10 steps of 100 ms at speed 10: about 100 ms, not 1 s.
        let (e, _) = engine_at(100.0, 8, 10.0);
        let t0 = Instant::now();
        let a = submit(&e, 10);
        poll_fn(|cx| a.poll_done(cx)).await;
        let took = t0.elapsed();
        assert!(took >= Duration::from_millis(95), "{took:?}");
        assert!(took < Duration::from_millis(600), "{took:?}");
        e.shutdown();
    }

    #[tokio::test]
    async fn shutdown_aborts_waiting_sequences() {
        let (e, _) = engine(300.0, 1);
        let a = submit(&e, 1000);
        tokio::time::sleep(Duration::from_millis(20)).await;
        tokio::task::spawn_blocking(move || e.shutdown())
            .await
            .unwrap();
        let s = poll_fn(|cx| a.poll_done(cx)).await;
        assert!(s.aborted && !s.finished, "{s:?}");
    }
}
