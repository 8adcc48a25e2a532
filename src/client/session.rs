//! Conversations driven: the arrival schedule and the concurrency cap apply to sessions (a
//! session holds its slot from its first turn to its last), and each session sends its turns
//! one after another, each with the whole history so far (the system message, every earlier
//! user message and the server's real, streamed answer), after the turn's think time; a
//! trace's turn, which holds its own context, is sent alone. A turn that fails ends its
//! session: the history it would extend does not exist.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio_util::task::TaskTracker;

use super::one::{Req, Shared, send};
use super::pace::Pacer;
use super::record::RequestRecord;
use crate::dataset::{Prompt, turn_messages};
use crate::load::Limit;

/// The sessions of a run's prompts: each one's prompt indices in turn order, sessions in
/// the dataset's order; `None` when no prompt belongs to a session.
pub(super) fn sessions(prompts: &[Prompt]) -> Option<Vec<Vec<usize>>> {
    let mut by: BTreeMap<u32, Vec<(u32, usize)>> = BTreeMap::new();
    for (i, p) in prompts.iter().enumerate() {
        if let Some(s) = &p.session {
            by.entry(s.session).or_default().push((s.turn, i));
        }
    }
    (!by.is_empty()).then(|| {
        by.into_values()
            .map(|mut turns| {
                turns.sort_unstable();
                turns.into_iter().map(|(_, i)| i).collect()
            })
            .collect()
    })
}

/// Turns each started session sends when a run asks for `count` requests: the sessions in
/// order (reused cyclically), the last one cut so the total is exactly `count`.
pub(super) fn plan(sessions: &[Vec<usize>], count: u64) -> Vec<usize> {
    let mut out = Vec::new();
    let mut left = count;
    let lens: Vec<u64> = sessions.iter().map(|s| s.len().max(1) as u64).collect();
    while left > 0 && !lens.is_empty() {
        let n = lens[out.len() % lens.len()].min(left);
        out.push(n as usize);
        left -= n;
    }
    out
}

/// Start sessions as `pacer` releases them until the plan, the duration or cancellation
/// ends it; each runs as a task on `tracker`, holding its concurrency slot throughout, and
/// sends a record per turn on `tx`. Returns the pacer (its dispatch lags and ramp log).
pub(super) async fn issue_sessions(
    shared: &Arc<Shared>,
    sessions: Arc<Vec<Vec<usize>>>,
    mut pacer: Pacer,
    tracker: &TaskTracker,
    tx: mpsc::UnboundedSender<RequestRecord>,
) -> Pacer {
    let turns_per_start = match shared.config.shape.limit {
        Limit::Requests(n) => Some(plan(&sessions, n)),
        Limit::Duration(_) => None,
    };
    let issue_until = pacer.issue_until();
    let mut started: usize = 0;
    while turns_per_start.as_ref().is_none_or(|p| started < p.len()) {
        let Some(release) = pacer.next().await else {
            break;
        };
        let turns = &sessions[started % sessions.len()];
        let n = turns_per_start.as_ref().map_or(turns.len(), |p| p[started]);
        let start = Start {
            id: started as u64,
            turns: turns[..n.min(turns.len())].to_vec(),
            scheduled: release.scheduled,
            dispatched: release.dispatched,
            issue_until,
        };
        let (shared, tx) = (shared.clone(), tx.clone());
        tracker.spawn(async move {
            let _slot = release.slot().await;
            session(&shared, start, &tx).await;
        });
        started += 1;
    }
    pacer
}

/// One session as it starts.
struct Start {
    /// Sessions in the order they started.
    id: u64,
    /// Prompt indices of the turns it sends.
    turns: Vec<usize>,
    scheduled: Instant,
    dispatched: Instant,
    /// Duration-bound runs: no turn is sent after this.
    issue_until: Option<Instant>,
}

/// Send a session's turns in order, each with the history so far, until one fails.
async fn session(shared: &Shared, start: Start, tx: &mpsc::UnboundedSender<RequestRecord>) {
    let Some(&first) = start.turns.first() else {
        return;
    };
    let system = shared.prompts[first]
        .session
        .as_ref()
        .and_then(|s| s.system.clone());
    let mut history: Vec<(String, String)> = Vec::with_capacity(start.turns.len());
    let (mut scheduled, mut dispatched) = (start.scheduled, start.dispatched);
    let mut previous: Option<(u32, u64)> = None;
    for (turn, &pi) in start.turns.iter().enumerate() {
        let prompt = &shared.prompts[pi];
        if turn > 0 {
            let think = prompt.session.as_ref().map_or(0, |s| s.think_us);
            let due = Instant::now() + Duration::from_micros(think);
            if start.issue_until.is_some_and(|u| due >= u) {
                break;
            }
            tokio::select! {
                _ = shared.cancel.cancelled() => break,
                _ = tokio::time::sleep_until(due.into()) => {}
            }
            (scheduled, dispatched) = (due, Instant::now());
        }
        let index = shared.next_index.fetch_add(1, Ordering::Relaxed);
        let standalone = prompt.session.as_ref().is_some_and(|s| s.standalone);
        let (req, counting) = if standalone {
            // A trace's turn holds its context: its prepared body, as counted.
            let req = Req {
                index,
                prompt_index: pi,
                body: shared.bodies[pi].clone(),
                prompt_len: prompt.prompt_len,
                output_len: prompt.output_len,
                want_text: false,
            };
            (req, None)
        } else {
            turn_request(shared, &history, (system.as_deref(), pi, index), previous)
        };
        let (mut record, answer) = send(shared, req, scheduled, dispatched).await;
        record.session = Some(start.id);
        record.turn = Some(turn as u32);
        if let Some(c) = counting
            && let Ok(Some(n)) = c.await
        {
            record.prompt_len = n;
        }
        let completed = record.outcome.is_completed();
        previous = Some((record.prompt_len, record.output_tokens()));
        let _ = tx.send(record);
        if !completed {
            break;
        }
        if !standalone {
            history.push((prompt.text.clone(), answer.unwrap_or_default()));
        }
    }
}

/// A conversation turn's request: the history so far and this turn's message, and its
/// count under way off the runtime (when the run has a counter). `turn` is the session's
/// system message, the prompt and the request index; `previous` the previous turn's
/// prompt length and answer tokens (the estimate without a counter).
fn turn_request(
    shared: &Shared,
    history: &[(String, String)],
    turn: (Option<&str>, usize, u64),
    previous: Option<(u32, u64)>,
) -> (Req, Option<tokio::task::JoinHandle<Option<u32>>>) {
    let (system, pi, index) = turn;
    let prompt = &shared.prompts[pi];
    let messages = turn_messages(system, history, &prompt.text);
    let body = shared.template().turn_body(&messages, prompt.output_len);
    let counting = shared.counter.clone().map(|counter| {
        let owned: Vec<(String, String)> = messages
            .iter()
            .map(|(r, c)| (r.to_string(), c.to_string()))
            .collect();
        tokio::task::spawn_blocking(move || counter.count(index, &owned))
    });
    // Without a counter: the previous turn's prompt and answer, then this message.
    let estimate = previous.map_or(prompt.prompt_len, |(len, out)| {
        len.saturating_add(u32::try_from(out).unwrap_or(u32::MAX))
            .saturating_add(prompt.prompt_len)
    });
    let req = Req {
        index,
        prompt_index: pi,
        body,
        prompt_len: estimate,
        output_len: prompt.output_len,
        want_text: true,
    };
    (req, counting)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataset::SessionTurn;

    fn turn(session: u32, turn: u32) -> Prompt {
        Prompt {
            text: format!("s{session}t{turn}"),
            prompt_len: 3,
            output_len: 2,
            at_us: None,
            session: Some(SessionTurn {
                session,
                turn,
                think_us: 0,
                system: None,
                standalone: false,
            }),
            messages: None,
        }
    }

    #[test]
    fn prompts_group_into_sessions_in_turn_order() {
        let prompts = vec![turn(0, 0), turn(1, 1), turn(0, 1), turn(1, 0), turn(0, 2)];
        assert_eq!(sessions(&prompts), Some(vec![vec![0, 2, 4], vec![3, 1]]));
        let plain = Prompt {
            session: None,
            ..turn(0, 0)
        };
        assert_eq!(sessions(&[plain]), None);
    }

    #[test]
    fn a_request_count_cuts_the_last_session() {
        let s = vec![vec![0, 1, 2], vec![3, 4]];
        assert_eq!(plan(&s, 4), vec![3, 1]);
        assert_eq!(plan(&s, 5), vec![3, 2]);
        // Reused cyclically past the dataset's sessions.
        assert_eq!(plan(&s, 9), vec![3, 2, 3, 1]);
        assert!(plan(&s, 0).is_empty());
    }
}
