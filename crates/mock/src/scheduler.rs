//! The continuous-batching scheduler, as a pure state machine without a clock: `plan` picks
//! what the next step runs (admitting waiting sequences up to `max_batch` and the token
//! budget, chunking long prefills) and says how long it takes; `complete` applies the step
//! and reports each sequence's progress. The wall-clock engine (`engine.rs`) and the
//! virtual-clock simulation (`simulate.rs`) both drive it. Not here: HTTP, timers, metrics.

use std::collections::VecDeque;

use crate::latency::LatencyModel;

/// One sequence the scheduler knows about; `K` is the caller's handle for it.
#[derive(Debug)]
struct Seq<K> {
    key: K,
    prompt: u32,
    prefilled: u32,
    target: u32,
    generated: u32,
    /// Prompt tokens scheduled for this sequence in the planned step (0 when decoding).
    chunk: u32,
    /// Whether the planned step includes this sequence.
    scheduled: bool,
}

/// What the planned step does.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepPlan {
    /// Sequences scheduled in the step.
    pub seqs: u32,
    /// Prompt tokens prefilled in the step.
    pub prefill_tokens: u32,
    /// Sequences admitted from the waiting queue by this step.
    pub admitted: u32,
    /// How long the step takes, in model milliseconds (before `speed`).
    pub ms: f64,
}

/// What a step did for one sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    /// The step ran the sequence's first prefill chunk.
    pub prefill_started: bool,
    /// The step produced a token (the first one ends the prefill).
    pub new_token: bool,
    /// Tokens generated so far.
    pub generated: u32,
    /// The sequence reached its target length and left the batch.
    pub finished: bool,
}

/// Waiting queue plus running batch.
#[derive(Debug)]
pub struct Scheduler<K> {
    model: LatencyModel,
    waiting: VecDeque<Seq<K>>,
    running: Vec<Seq<K>>,
}

impl<K> Scheduler<K> {
    pub fn new(model: LatencyModel) -> Self {
        Self {
            model,
            waiting: VecDeque::new(),
            running: Vec::new(),
        }
    }

    /// A new request with `prompt` tokens that will generate `target` (>= 1) tokens.
    pub fn push(&mut self, key: K, prompt: u32, target: u32) {
        self.waiting.push_back(Seq {
            key,
            prompt,
            prefilled: 0,
            target: target.max(1),
            generated: 0,
            chunk: 0,
            scheduled: false,
        });
    }

    /// Sequences in the batch (admitted, prefilling or decoding).
    pub fn running(&self) -> usize {
        self.running.len()
    }

    /// Sequences waiting for a slot.
    pub fn waiting(&self) -> usize {
        self.waiting.len()
    }

    /// Nothing to do.
    pub fn is_idle(&self) -> bool {
        self.running.is_empty() && self.waiting.is_empty()
    }

    /// Keep only the sequences (waiting or running) whose key `keep` accepts.
    pub fn retain(&mut self, mut keep: impl FnMut(&K) -> bool) {
        self.running.retain(|s| keep(&s.key));
        self.waiting.retain(|s| keep(&s.key));
    }

    /// Plan the next step, or `None` when idle. Running sequences go first (one token for a
    /// decode, a prefill chunk for one still prefilling), then waiting ones are admitted in
    /// arrival order while a batch slot and token budget remain.
    pub fn plan(&mut self) -> Option<StepPlan> {
        if self.is_idle() {
            return None;
        }
        let mut budget = self.model.max_num_batched_tokens;
        let mut seqs = 0u32;
        let mut prefill_tokens = 0u32;
        for s in &mut self.running {
            s.scheduled = false;
            s.chunk = 0;
            if budget == 0 {
                continue;
            }
            if s.prefilled < s.prompt {
                s.chunk = (s.prompt - s.prefilled).min(budget);
                budget -= s.chunk;
                prefill_tokens += s.chunk;
            } else {
                budget -= 1;
            }
            s.scheduled = true;
            seqs += 1;
        }
        let mut admitted = 0;
        while budget > 0 && self.running.len() < self.model.max_batch as usize {
            let Some(mut s) = self.waiting.pop_front() else {
                break;
            };
            // An empty prompt still costs one token to produce the first output.
            s.chunk = s.prompt.min(budget);
            budget -= s.chunk.max(1).min(budget);
            prefill_tokens += s.chunk;
            s.scheduled = true;
            seqs += 1;
            admitted += 1;
            self.running.push(s);
        }
        Some(StepPlan {
            seqs,
            prefill_tokens,
            admitted,
            ms: self.model.step_ms(seqs, prefill_tokens),
        })
    }

    /// Apply the planned step: report every scheduled sequence's progress to `report` and
    /// remove the finished ones. O(running).
    pub fn complete(&mut self, mut report: impl FnMut(&mut K, Progress)) {
        self.running.retain_mut(|s| {
            if !s.scheduled {
                return true;
            }
            s.scheduled = false;
            let prefill_started =
                (s.chunk > 0 && s.prefilled == 0) || (s.prompt == 0 && s.generated == 0);
            let was_prefilling = s.prefilled < s.prompt || s.generated == 0;
            s.prefilled += s.chunk;
            s.chunk = 0;
            let new_token = !was_prefilling || s.prefilled >= s.prompt;
            if new_token {
                s.generated += 1;
            }
            let finished = s.generated >= s.target;
            report(
                &mut s.key,
                Progress {
                    prefill_started,
                    new_token,
                    generated: s.generated,
                    finished,
                },
            );
            !finished
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::latency::Curve;

    fn model(max_batch: u32, budget: u32) -> LatencyModel {
        LatencyModel {
            decode: Curve::linear(10.0, 1.0),
            prefill: Curve::linear(0.0, 0.1),
            max_batch,
            max_num_batched_tokens: budget,
        }
    }

    fn step(s: &mut Scheduler<u32>) -> (StepPlan, Vec<(u32, Progress)>) {
        let plan = s.plan().unwrap();
        let mut out = Vec::new();
        s.complete(|k, p| out.push((*k, p)));
        (plan, out)
    }

    #[test]
    fn prefill_then_decode_until_target() {
        let mut s = Scheduler::new(model(8, 1000));
        s.push(7, 100, 3);
        let (plan, out) = step(&mut s);
        assert_eq!((plan.seqs, plan.prefill_tokens, plan.admitted), (1, 100, 1));
        assert_eq!(plan.ms, 11.0 + 10.0);
        let p = out[0].1;
        assert!(p.prefill_started && p.new_token && !p.finished && p.generated == 1);
        let (plan, out) = step(&mut s);
        assert_eq!((plan.prefill_tokens, plan.ms), (0, 11.0));
        assert!(!out[0].1.prefill_started && out[0].1.generated == 2);
        let (_, out) = step(&mut s);
        assert!(out[0].1.finished);
        assert!(s.is_idle() && s.plan().is_none());
    }

    #[test]
    fn long_prompt_is_chunked_across_steps() {
        let mut s = Scheduler::new(model(8, 64));
        s.push(1, 150, 2);
        let (p1, o1) = step(&mut s);
        assert_eq!(p1.prefill_tokens, 64);
        assert!(o1[0].1.prefill_started && !o1[0].1.new_token);
        let (p2, o2) = step(&mut s);
        assert_eq!(p2.prefill_tokens, 64);
        assert!(!o2[0].1.prefill_started && !o2[0].1.new_token);
        let (p3, o3) = step(&mut s);
        assert_eq!(p3.prefill_tokens, 22);
        assert!(o3[0].1.new_token && o3[0].1.generated == 1);
    }

    #[test]
    fn over_max_batch_waits_for_a_free_slot() {
        let mut s = Scheduler::new(model(2, 1000));
        for k in 0..3 {
            s.push(k, 10, 2);
        }
        let (plan, out) = step(&mut s);
        assert_eq!((plan.admitted, s.running(), s.waiting()), (2, 2, 1));
        assert!(out.iter().all(|(k, _)| *k < 2));
        let (plan, _) = step(&mut s);
        assert_eq!(plan.admitted, 0, "no slot until the first two finish");
        let (plan, out) = step(&mut s);
        assert_eq!((plan.admitted, out[0].0), (1, 2));
    }

    #[test]
    fn decode_takes_budget_before_new_prefills() {
        let mut s = Scheduler::new(model(8, 10));
        s.push(0, 5, 5);
        step(&mut s);
        s.push(1, 100, 5);
        let (plan, _) = step(&mut s);
        assert_eq!((plan.seqs, plan.prefill_tokens), (2, 9));
    }

    #[test]
    fn retain_drops_abandoned_sequences() {
        let mut s = Scheduler::new(model(1, 1000));
        s.push(0, 5, 5);
        s.push(1, 5, 5);
        step(&mut s);
        s.retain(|k| *k != 0);
        assert_eq!((s.running(), s.waiting()), (0, 1));
        let (plan, out) = step(&mut s);
        assert_eq!((plan.admitted, out[0].0), (1, 1));
    }

    #[test]
    fn empty_prompt_still_produces_a_first_token() {
        let mut s = Scheduler::new(model(8, 100));
        s.push(0, 0, 2);
        let (_, out) = step(&mut s);
        assert!(out[0].1.prefill_started && out[0].1.new_token);
    }
}
