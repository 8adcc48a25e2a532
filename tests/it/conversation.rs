//! Conversations end to end: `orchestrate bench --dataset-name conversation` against the mock
//! server (prefix cache on; the shipped tokenizer and chat template on both sides). Every
//! turn is sent with its history, the server's real answers included (the server counts
//! exactly the conversation rebuilt from the recorded answers); the concurrency cap counts
//! sessions; the later turns find their history in the prefix cache, so the per-turn hit
//! rate grows with the turn index and the workload's ideal rate is high; a request rate
//! schedules session starts.

use std::collections::BTreeMap;
use std::sync::Arc;

use orchestrate::dataset::{self, ChatCounter, Conversation, DatasetSpec, Dist, Tokenizer};
use serde_json::Value;

use crate::prefix_measured::{bench, mock, shipped};

/// Sessions of 4 turns (8 messages): 16-token questions, 8-token answers, a 64-token system
/// prompt shared by all, 30 ms of think time.
const CONV: &[&str] = &[
    "--endpoint",
    "/v1/chat/completions",
    "--dataset-name",
    "conversation",
    "--conversation-num-turns",
    "8",
    "--conversation-input-len",
    "16",
    "--conversation-output-len",
    "8",
    "--conversation-system-prompt-len",
    "64",
    "--conversation-think-time",
    "30ms",
    "--ignore-eos",
];

pub(crate) fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// Records by session, each in turn order.
pub(crate) fn by_session(records: &[Value]) -> BTreeMap<u64, Vec<&Value>> {
    let mut out: BTreeMap<u64, Vec<&Value>> = BTreeMap::new();
    for r in records {
        out.entry(u(&r["session"])).or_default().push(r);
    }
    for turns in out.values_mut() {
        turns.sort_by_key(|r| u(&r["turn"]));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn turns_carry_their_history_and_find_it_in_the_prefix_cache() {
    let server = mock(1_000_000, 0).await;
    // 24 requests, 2 sessions at a time, the answers kept in the records.
    let more = [
        "--num-prompts",
        "24",
        "--max-concurrency",
        "2",
        "--save-detailed",
    ];
    let (result, records, _) = bench(&server.base, &[CONV, &more[..]].concat()).await;
    assert_eq!(records.len(), 24);
    let sessions = by_session(&records);
    assert_eq!(sessions.len(), 6);

    // The same prompts as the run's (same spec and seed), to rebuild each turn's messages.
    let tok = Arc::new(Tokenizer::from_file(&shipped()).unwrap());
    let spec = DatasetSpec::Conversation(Conversation {
        path: None,
        num_turns: Some(Dist::Constant { value: 8 }),
        input_len: 16,
        output_len: Some(8),
        range_ratio: 0.0,
        input_dist: None,
        output_dist: None,
        prefix_len: 0,
        system_prompt_len: 64,
        think_time: std::time::Duration::from_millis(30),
    });
    let prompts = dataset::generate(&spec, &tok, 24, 0).unwrap();
    let counter = ChatCounter::new(tok).unwrap().unwrap();
    for turns in sessions.values() {
        let turn_indices: Vec<u64> = turns.iter().map(|r| u(&r["turn"])).collect();
        assert_eq!(turn_indices, [0, 1, 2, 3]);
        let first = &prompts[u(&turns[0]["prompt_index"]) as usize];
        let system = first.session.as_ref().unwrap().system.clone().unwrap();
        let mut history: Vec<(String, String)> = Vec::new();
        for (k, r) in turns.iter().enumerate() {
            assert_eq!(r["outcome"]["status"], "completed", "{r}");
            let user = &prompts[u(&r["prompt_index"]) as usize].text;
            // What the server counted is exactly the conversation with the recorded answers,
            // and so is the client's prompt_len.
            let messages = dataset::turn_messages(Some(&system), &history, user);
            let ids = counter.ids(&messages).unwrap();
            assert_eq!(
                u(&r["usage"]["prompt_tokens"]),
                ids.len() as u64,
                "turn {k}"
            );
            assert_eq!(u(&r["prompt_len"]), ids.len() as u64, "turn {k}");
            if k > 0 {
                // Turn k holds turn k-1's prompt and its answer.
                let prev = turns[k - 1];
                let floor = u(&prev["usage"]["prompt_tokens"])
                    + u(&prev["usage"]["completion_tokens"])
                    + 16;
                assert!(u(&r["usage"]["prompt_tokens"]) >= floor, "turn {k}");
                // ...and the server served at least turn k-1's prompt from its cache, less
                // the partial block and the last token.
                let cached = u(&r["usage"]["cached_tokens"]);
                assert!(
                    cached + 32 >= u(&prev["usage"]["prompt_tokens"]),
                    "turn {k}: {cached}"
                );
            }
            let answer = r["generated_text"].as_str().unwrap().to_string();
            assert!(!answer.is_empty(), "turn {k}");
            history.push((user.clone(), answer));
        }
    }

    // Sessions in flight, not requests: never more than 2 sessions overlap, think time and
    // all, although a session between turns sends nothing.
    let s = &result["sessions"];
    assert_eq!(u(&s["sessions"]), 6);
    assert_eq!(u(&s["completed_sessions"]), 6);
    assert_eq!(s["mean_turns_completed"].as_f64(), Some(4.0));
    assert_eq!(u(&s["max_concurrent_sessions"]), 2);
    let spans: Vec<(u64, u64)> = sessions
        .values()
        .map(|t| (u(&t[0]["sent_us"]), u(&t[3]["end_us"])))
        .collect();
    for (a, (start, _)) in spans.iter().enumerate() {
        let open = spans
            .iter()
            .enumerate()
            .filter(|(b, (s, e))| *b != a && s <= start && start < e)
            .count();
        assert!(
            open <= 1,
            "session {a} started with {open} others in flight"
        );
    }
    assert!(s["duration"]["mean_session_duration_ms"].as_f64().unwrap() >= 90.0);

    // Per turn: the history grows and the cache serves more of it.
    let per_turn = s["turns"].as_array().unwrap();
    assert_eq!(per_turn.len(), 4);
    let rates: Vec<f64> = per_turn
        .iter()
        .map(|t| t["prefix_cache_hit_rate"].as_f64().unwrap())
        .collect();
    assert!(rates.windows(2).all(|w| w[0] < w[1]), "{rates:?}");
    assert!(rates[3] > 0.6, "{rates:?}");
    let inputs: Vec<f64> = per_turn
        .iter()
        .map(|t| t["mean_input_tokens"].as_f64().unwrap())
        .collect();
    assert!(inputs.windows(2).all(|w| w[0] < w[1]), "{inputs:?}");
    let ideal = result["ideal_prefix_cache_hit_rate"].as_f64().unwrap();
    assert!(ideal > 0.6, "ideal {ideal}");
    let ratio = result["prefix_cache_hit_vs_ideal"].as_f64().unwrap();
    assert!((0.9..1.1).contains(&ratio), "achieved/ideal {ratio}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_rate_schedules_session_starts() {
    let server = mock(1_000_000, 0).await;
    let rate = ["--request-rate", "20", "--num-prompts", "10"];
    let (result, records, _) = bench(&server.base, &[CONV, &rate[..]].concat()).await;
    // 10 requests: two whole sessions of 4 and the third cut to 2.
    assert_eq!(records.len(), 10);
    let sessions = by_session(&records);
    let lens: Vec<usize> = sessions.values().map(Vec::len).collect();
    assert_eq!(lens, [4, 4, 2]);
    // Three arrivals, one per session start, spread at about 20 per second; later turns
    // follow their previous answer after the think time, not the schedule.
    let starts: Vec<u64> = sessions
        .values()
        .map(|t| u(&t[0]["scheduled_us"]))
        .collect();
    assert!(starts.windows(2).all(|w| w[0] < w[1]), "{starts:?}");
    for turns in sessions.values() {
        for w in turns.windows(2) {
            assert!(u(&w[1]["scheduled_us"]) >= u(&w[0]["end_us"]) + 30_000);
        }
    }
    assert_eq!(u(&result["sessions"]["sessions"]), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agentic_trace_replays_its_sessions_turn_after_turn() {
    use orchestrate::client::{self, ClientConfig, NoObserver};
    use orchestrate::dataset::Replay;
    use orchestrate::load::{Limit, LoadShape, Rate};
    use std::time::Duration;
    use tokio_util::sync::CancellationToken;

    let server = mock(1_000_000, 0).await;
    let path = crate::common::repo().join("tests/fixtures/traces/agentic-sample.jsonl");
    let trace = dataset::read_trace(&path).unwrap();
    let replay = Replay {
        block_size: 32,
        speedup: 4.0,
        start: Duration::ZERO,
        duration: None,
    };
    let spec = DatasetSpec::Mooncake {
        path: path.clone(),
        replay,
    };
    let tok = Tokenizer::from_file(&shipped()).unwrap();
    let prompts = dataset::generate(&spec, &tok, 1000, 0).unwrap();
    assert_eq!(prompts.len(), trace.len());
    let shape = LoadShape {
        max_concurrency: None,
        rate: Rate::Unlimited,
        ramp_up: None,
        limit: Limit::Requests(prompts.len() as u64),
        warmup: Duration::ZERO,
        cooldown: Duration::ZERO,
    };
    let mut config = ClientConfig::new(server.base.clone(), "mock-model", shape);
    config.ignore_eos = true;
    let outcome = client::run(
        &config,
        prompts.clone(),
        Arc::new(NoObserver),
        CancellationToken::new(),
    )
    .await
    .unwrap();
    let records: Vec<Value> = outcome
        .records
        .iter()
        .map(|r| serde_json::to_value(r).unwrap())
        .collect();
    assert_eq!(records.len(), trace.len());
    let sessions = by_session(&records);
    assert_eq!(sessions.len(), 6);
    for turns in sessions.values() {
        let first = &prompts[u(&turns[0]["prompt_index"]) as usize];
        // A session starts at its first turn's timestamp (a quarter of the trace's time)...
        assert_eq!(u(&turns[0]["scheduled_us"]), first.at_us.unwrap());
        for w in turns.windows(2) {
            assert_eq!(w[0]["outcome"]["status"], "completed");
            let p = &prompts[u(&w[1]["prompt_index"]) as usize];
            let think = p.session.as_ref().unwrap().think_us;
            assert!(think > 0);
            // ...and each later turn waits its delay after the previous answer ended...
            assert!(u(&w[1]["scheduled_us"]) >= u(&w[0]["end_us"]) + think);
            // ...and finds the context its hash ids share with the previous turn cached.
            assert!(u(&w[1]["usage"]["cached_tokens"]) >= 32, "{}", w[1]);
            assert_eq!(u(&w[1]["prompt_len"]), u64::from(p.prompt_len));
        }
    }
}
