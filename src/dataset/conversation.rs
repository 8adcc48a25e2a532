//! Multi-turn conversations (sessions): each prompt is one user turn of a session, sent by the
//! client with the whole history so far (the server's real answers included). Sessions are
//! synthesized with vLLM's multi-turn generator's knobs (turns drawn from a distribution,
//! per-turn input and output lengths, a system prompt shared by every session) or read from
//! ShareGPT's conversations. Also here: the messages of a turn, and their exact token count
//! through the model's chat template.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use super::dist::Dist;
use super::random::len_range;
use super::sharegpt::read_conversations;
use super::synth::{exact_text, random_ids};
use super::{ChatTemplate, DatasetError, Prompt, Tokenizer};

/// Messages per session when `num_turns` is not given: 4 user turns and their answers.
pub const DEFAULT_NUM_TURNS: u32 = 8;

/// Where a prompt sits in its conversation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionTurn {
    /// The conversation, from 0, in the dataset's order.
    pub session: u32,
    /// The user turn within it, from 0.
    pub turn: u32,
    /// Think time: how long after the previous answer ended this turn is sent, microseconds
    /// (0 for the first turn).
    pub think_us: u64,
    /// First turn only: the system message every turn of the session starts with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system: Option<String>,
    /// The prompt already holds the session's context (a trace's turn, whose hash ids name
    /// it): sent alone as prepared, not after the history.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub standalone: bool,
}

/// The `conversation` dataset's parameters. Names follow vLLM's `generate_multi_turn.json`
/// where it has them (docs/task-file.md has the mapping).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Conversation {
    /// ShareGPT JSON to read the sessions from; `None` synthesizes them.
    pub path: Option<PathBuf>,
    /// Messages per session, user and assistant together, as vLLM counts them (rounded up to
    /// an even number, at least 2); with `path`, a cap on each conversation (vLLM's
    /// `--max-turns`). `None`: [`DEFAULT_NUM_TURNS`] when synthesized, uncapped when read.
    pub num_turns: Option<Dist>,
    /// Tokens of each user message (vLLM's `prompt_input.num_tokens`); synthesized sessions.
    pub input_len: u32,
    /// Tokens of each answer (vLLM's `prompt_output.num_tokens`); with `path`, `None` takes
    /// the reference answer's length.
    pub output_len: Option<u32>,
    /// Input and output lengths vary uniformly within ±ratio (vLLM's `uniform`).
    pub range_ratio: f64,
    /// Synthesized sessions: each user message's length drawn from this instead of
    /// `input_len` ± `range_ratio` (vLLM's `prompt_input.num_tokens` distribution).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_dist: Option<Dist>,
    /// Synthesized sessions: each answer's length drawn from this instead of `output_len`
    /// ± `range_ratio` (vLLM's `prompt_output.num_tokens` distribution).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_dist: Option<Dist>,
    /// Tokens of a prefix unique to each synthesized session, at the start of its first user
    /// message (vLLM's `prompt_input.prefix_num_tokens`); 0 for none.
    #[serde(default)]
    pub prefix_len: u32,
    /// Tokens of the system prompt every synthesized session shares (vLLM's
    /// `common_prefix_num_tokens`, sent as a system message); 0 for none.
    pub system_prompt_len: u32,
    /// Pause between an answer and the next user turn of the same session.
    pub think_time: Duration,
}

impl Conversation {
    /// The dataset in a plan's words.
    pub fn describe(&self) -> String {
        let turns = match &self.num_turns {
            Some(Dist::Constant { value }) => format!("{value} messages"),
            Some(d) => format!("{d:?} messages"),
            None => format!("{DEFAULT_NUM_TURNS} messages"),
        };
        let source = match &self.path {
            Some(p) => format!("sharegpt {}", p.display()),
            None => {
                let input = match &self.input_dist {
                    Some(d) => format!("{d:?}"),
                    None => self.input_len.to_string(),
                };
                let output = match &self.output_dist {
                    Some(d) => format!("{d:?}"),
                    None => self.output_len.unwrap_or(0).to_string(),
                };
                let prefix = match self.prefix_len {
                    0 => String::new(),
                    n => format!(", own prefix {n}"),
                };
                format!(
                    "{input} in / {output} out per turn, system prompt {}{prefix}",
                    self.system_prompt_len
                )
            }
        };
        format!(
            "conversation {source}, {turns} per session, think {}",
            crate::units::format_duration(self.think_time)
        )
    }
}

/// Sessions of at least `num_prompts` turns in all, as prompts in session and turn order.
pub(super) fn conversation(
    tok: &Tokenizer,
    c: &Conversation,
    num_prompts: usize,
    seed: u64,
) -> Result<Vec<Prompt>, DatasetError> {
    for (key, dist) in [
        ("num_turns", &c.num_turns),
        ("input_dist", &c.input_dist),
        ("output_dist", &c.output_dist),
    ] {
        if let Some(why) = dist.as_ref().and_then(Dist::problem) {
            return Err(DatasetError::Invalid(format!("`{key}`: {why}")));
        }
    }
    if !(0.0..1.0).contains(&c.range_ratio) {
        return Err(DatasetError::Invalid(format!(
            "`range_ratio` must be in [0, 1), got {}",
            c.range_ratio
        )));
    }
    let think_us = u64::try_from(c.think_time.as_micros()).unwrap_or(u64::MAX);
    let mut rng = StdRng::seed_from_u64(seed);
    let sessions = match &c.path {
        Some(path) => sharegpt_sessions(tok, c, path, num_prompts, &mut rng)?,
        None => synthetic_sessions(tok, c, num_prompts, &mut rng)?,
    };
    let mut prompts = Vec::with_capacity(num_prompts);
    for (session, (system, turns)) in sessions.into_iter().enumerate() {
        for (turn, (text, output_len)) in turns.into_iter().enumerate() {
            let prompt_len = tok.count(&text)? as u32;
            prompts.push(Prompt {
                text,
                prompt_len,
                output_len,
                at_us: None,
                session: Some(SessionTurn {
                    session: session as u32,
                    turn: turn as u32,
                    think_us: if turn == 0 { 0 } else { think_us },
                    system: if turn == 0 { system.clone() } else { None },
                    standalone: false,
                }),
                messages: None,
            });
        }
    }
    Ok(prompts)
}

/// One session: its system message and its user turns (text, answer length).
type Session = (Option<String>, Vec<(String, u32)>);

/// User turns per session from a draw of messages (vLLM: at least 2, rounded up to even).
fn user_turns(messages: u32) -> usize {
    let m = messages.max(2);
    ((m + m % 2) / 2) as usize
}

fn synthetic_sessions(
    tok: &Tokenizer,
    c: &Conversation,
    num_prompts: usize,
    rng: &mut StdRng,
) -> Result<Vec<Session>, DatasetError> {
    if c.input_len == 0 && c.input_dist.is_none() {
        return Err(DatasetError::Invalid(
            "`input_len` must be at least 1 token".into(),
        ));
    }
    let turns = c.num_turns.clone().unwrap_or(Dist::Constant {
        value: DEFAULT_NUM_TURNS,
    });
    let system = match c.system_prompt_len {
        0 => None,
        n => Some(exact_text(tok, rng, &[], n as usize)?.0),
    };
    let (in_lo, in_hi) = len_range(c.input_len, c.range_ratio);
    let (out_lo, out_hi) = len_range(c.output_len.unwrap_or(1).max(1), c.range_ratio);
    let (mut sessions, mut total) = (Vec::new(), 0usize);
    while total < num_prompts.max(1) {
        let n = user_turns(turns.sample(rng));
        let mut session = Vec::with_capacity(n);
        // vLLM's per-conversation prefix opens the first user message.
        let prefix = random_ids(tok, rng, c.prefix_len as usize);
        for turn in 0..n {
            let input = match &c.input_dist {
                Some(d) => d.sample(rng).max(1),
                None => rng.random_range(in_lo..=in_hi),
            } as usize;
            let output = match &c.output_dist {
                Some(d) => d.sample(rng).max(1),
                None => rng.random_range(out_lo..=out_hi),
            };
            let (text, _) = if turn == 0 {
                exact_text(tok, rng, &prefix, prefix.len() + input)?
            } else {
                exact_text(tok, rng, &[], input)?
            };
            session.push((text, output));
        }
        total += n;
        sessions.push((system.clone(), session));
    }
    Ok(sessions)
}

fn sharegpt_sessions(
    tok: &Tokenizer,
    c: &Conversation,
    path: &Path,
    num_prompts: usize,
    rng: &mut StdRng,
) -> Result<Vec<Session>, DatasetError> {
    let mut conversations = read_conversations(path)?;
    conversations.shuffle(rng);
    let (mut sessions, mut total) = (Vec::new(), 0usize);
    for messages in conversations {
        if total >= num_prompts.max(1) {
            break;
        }
        let cap = c
            .num_turns
            .as_ref()
            .map_or(usize::MAX, |d| user_turns(d.sample(rng)));
        let mut system = None;
        let mut turns: Vec<(String, u32)> = Vec::new();
        let mut pending: Option<String> = None;
        for (from, value) in messages {
            match from.as_str() {
                "system" if turns.is_empty() && pending.is_none() => system = Some(value),
                "human" | "user" if pending.is_none() => pending = Some(value),
                "gpt" | "assistant" | "chatgpt" | "bard" | "bing" => {
                    let Some(user) = pending.take() else { break };
                    let out = match c.output_len {
                        Some(n) => n,
                        None => tok.count(&value)?.max(1) as u32,
                    };
                    turns.push((user, out));
                }
                // Two user messages in a row, or an unknown role: the conversation ends here.
                _ => break,
            }
            if turns.len() >= cap {
                break;
            }
        }
        if !turns.is_empty() {
            total += turns.len();
            sessions.push((system, turns));
        }
    }
    if sessions.is_empty() {
        return Err(DatasetError::Format {
            path: path.to_path_buf(),
            message: "no conversation with a user message followed by an answer".into(),
        });
    }
    Ok(sessions)
}

/// The messages of one turn as `(role, content)`: the system message, every earlier turn's
/// user message and the server's answer to it, then this turn's user message.
pub fn turn_messages<'a>(
    system: Option<&'a str>,
    history: &'a [(String, String)],
    user: &'a str,
) -> Vec<(&'a str, &'a str)> {
    let mut out = Vec::with_capacity(history.len() * 2 + 2);
    if let Some(s) = system {
        out.push(("system", s));
    }
    for (q, a) in history {
        out.push(("user", q.as_str()));
        out.push(("assistant", a.as_str()));
    }
    out.push(("user", user));
    out
}

/// Counts a turn's messages as the server does: rendered through the model's chat template
/// and tokenized. Blocking.
pub struct ChatCounter {
    tok: Arc<Tokenizer>,
    template: ChatTemplate,
}

impl ChatCounter {
    /// The counter of `tok`'s chat template; `None` without a local template.
    pub fn new(tok: Arc<Tokenizer>) -> Result<Option<Self>, DatasetError> {
        Ok(tok
            .chat_template()?
            .map(|template| ChatCounter { tok, template }))
    }

    /// The token ids the server sees for `messages` (`(role, content)`).
    pub fn ids(&self, messages: &[(&str, &str)]) -> Result<Vec<u32>, DatasetError> {
        self.tok.encode(&self.template.render(messages)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHIPPED: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/data/tokenizer/tokenizer.json");

    fn params() -> Conversation {
        Conversation {
            path: None,
            num_turns: Some(Dist::Uniform { min: 3, max: 6 }),
            input_len: 20,
            output_len: Some(5),
            range_ratio: 0.0,
            input_dist: None,
            output_dist: None,
            prefix_len: 0,
            system_prompt_len: 12,
            think_time: Duration::from_millis(7),
        }
    }

    #[test]
    fn lengths_follow_their_distributions_and_each_session_opens_with_its_own_prefix() {
        let tok = Tokenizer::from_file(Path::new(SHIPPED)).unwrap();
        let c = Conversation {
            input_dist: Some(Dist::Uniform { min: 5, max: 9 }),
            output_dist: Some(Dist::Poisson {
                alpha: 4.0,
                max: Some(7),
            }),
            prefix_len: 10,
            system_prompt_len: 0,
            num_turns: Some(Dist::Constant { value: 6 }),
            ..params()
        };
        let prompts = conversation(&tok, &c, 60, 2).unwrap();
        let (mut inputs, mut outputs) = (Vec::new(), Vec::new());
        let mut prefixes = std::collections::HashSet::new();
        for p in &prompts {
            let turn = p.session.as_ref().unwrap().turn;
            let n = tok.count(&p.text).unwrap() as u32;
            assert_eq!(n, p.prompt_len);
            if turn == 0 {
                // The session's own 10 tokens, then the turn's 5-9.
                assert!((15..=19).contains(&n), "{n}");
                let ids = tok.encode(&p.text).unwrap();
                assert!(prefixes.insert(ids[..10].to_vec()), "a prefix repeats");
            } else {
                inputs.push(n);
            }
            outputs.push(p.output_len);
        }
        assert!(inputs.iter().all(|n| (5..=9).contains(n)), "{inputs:?}");
        assert!(inputs.contains(&5) && inputs.contains(&9), "{inputs:?}");
        assert!(outputs.iter().all(|n| (1..=7).contains(n)), "{outputs:?}");
        assert!(
            outputs
                .iter()
                .collect::<std::collections::HashSet<_>>()
                .len()
                > 2
        );
        let bad = Conversation {
            input_dist: Some(Dist::Uniform { min: 9, max: 5 }),
            ..c
        };
        let e = conversation(&tok, &bad, 4, 0).unwrap_err().to_string();
        assert!(e.contains("`input_dist`"), "{e}");
    }

    #[test]
    fn synthetic_sessions_have_their_turns_lengths_and_shared_system_prompt() {
        let tok = Tokenizer::from_file(Path::new(SHIPPED)).unwrap();
        let prompts = conversation(&tok, &params(), 30, 1).unwrap();
        assert!(prompts.len() >= 30);
        let mut systems = std::collections::HashSet::new();
        let mut per_session: std::collections::BTreeMap<u32, Vec<&Prompt>> = Default::default();
        for p in &prompts {
            let s = p.session.as_ref().unwrap();
            per_session.entry(s.session).or_default().push(p);
            assert_eq!(tok.count(&p.text).unwrap(), 20);
            assert_eq!(p.output_len, 5);
            if s.turn == 0 {
                assert_eq!(s.think_us, 0);
                systems.insert(s.system.clone().unwrap());
            } else {
                assert_eq!(s.think_us, 7000);
                assert_eq!(s.system, None);
            }
        }
        // One system prompt of exactly 12 tokens, shared by every session.
        assert_eq!(systems.len(), 1);
        assert_eq!(tok.count(systems.iter().next().unwrap()).unwrap(), 12);
        // 3..=6 messages: 2 or 3 user turns, in order.
        for turns in per_session.values() {
            assert!((2..=3).contains(&turns.len()), "{}", turns.len());
            for (i, p) in turns.iter().enumerate() {
                assert_eq!(p.session.as_ref().unwrap().turn, i as u32);
            }
        }
        assert!(per_session.values().any(|t| t.len() == 3));
        // Reproducible from the seed.
        assert_eq!(prompts, conversation(&tok, &params(), 30, 1).unwrap());
        let d = params().describe();
        assert!(
            d.starts_with("conversation 20 in / 5 out per turn, system prompt 12")
                && d.contains("min: 3, max: 6 } messages per session"),
            "{d}"
        );
    }

    #[test]
    fn sharegpt_conversations_become_sessions() {
        let tok = Tokenizer::from_file(Path::new(SHIPPED)).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sg.json");
        let data = serde_json::json!([
            {"conversations": [
                {"from": "system", "value": "be brief"},
                {"from": "human", "value": "first question here"},
                {"from": "gpt", "value": "an answer of some length"},
                {"from": "human", "value": "second question"},
                {"from": "gpt", "value": "ok"},
                {"from": "human", "value": "dangling question without answer"}]},
            {"conversations": [{"from": "gpt", "value": "no question"}]}
        ]);
        std::fs::write(&path, data.to_string()).unwrap();
        let c = Conversation {
            path: Some(path.clone()),
            num_turns: None,
            output_len: None,
            ..params()
        };
        let prompts = conversation(&tok, &c, 10, 0).unwrap();
        let texts: Vec<&str> = prompts.iter().map(|p| p.text.as_str()).collect();
        assert_eq!(texts, ["first question here", "second question"]);
        let first = prompts[0].session.as_ref().unwrap();
        assert_eq!(first.system.as_deref(), Some("be brief"));
        assert_eq!(
            prompts[0].output_len as usize,
            tok.count("an answer of some length").unwrap()
        );
        assert_eq!(prompts[1].session.as_ref().unwrap().turn, 1);
        // vLLM's --max-turns: 2 messages keep the first turn only.
        let capped = Conversation {
            num_turns: Some(Dist::Constant { value: 2 }),
            ..c
        };
        assert_eq!(conversation(&tok, &capped, 10, 0).unwrap().len(), 1);
    }

    #[test]
    fn a_turn_carries_the_history_with_the_real_answers() {
        let history = vec![
            ("q0".to_string(), "real answer 0".to_string()),
            ("q1".to_string(), "real answer 1".to_string()),
        ];
        let m = turn_messages(Some("sys"), &history, "q2");
        assert_eq!(
            m,
            [
                ("system", "sys"),
                ("user", "q0"),
                ("assistant", "real answer 0"),
                ("user", "q1"),
                ("assistant", "real answer 1"),
                ("user", "q2"),
            ]
        );
        assert_eq!(turn_messages(None, &[], "q"), [("user", "q")]);
        // Counted through the template: each turn's prompt starts with the previous one's
        // rendered conversation, so the server's prefix cache can serve it.
        let tok = Arc::new(Tokenizer::from_file(Path::new(SHIPPED)).unwrap());
        let counter = ChatCounter::new(tok).unwrap().unwrap();
        let one = counter
            .ids(&turn_messages(Some("sys"), &history[..1], "q1"))
            .unwrap();
        let two = counter.ids(&m).unwrap();
        assert!(two.len() > one.len());
        let shared = one.iter().zip(&two).take_while(|(a, b)| a == b).count();
        assert!(shared + 8 >= one.len(), "{shared} of {}", one.len());
    }
}
