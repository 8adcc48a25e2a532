//! Chat prompts of exact lengths. On the chat endpoint the server renders the model's chat
//! template around the user message (`<｜User｜>...<｜Assistant｜>`, BOS, role headers) and
//! tokenizes the result, so the input length it sees is longer than the raw text. This module
//! renders the template (`ChatTemplate`, in the `orchestrate-base` crate, which the mock server
//! shares) and trims each prompt's text until the rendered conversation re-tokenizes to exactly
//! the requested length.

use std::collections::HashMap;

pub use orchestrate_base::chat_template::ChatTemplate;
use orchestrate_base::chat_template::TemplateError;
use serde::Serialize;

use super::server_tokenizer::ServerTokenizer;
use super::synth::cut_exact;
use super::{DatasetError, Prompt, Tokenizer};

/// Attempts at fitting one prompt before keeping the closest length.
const FITS: usize = 8;

impl From<TemplateError> for DatasetError {
    fn from(e: TemplateError) -> Self {
        match e {
            TemplateError::Read { path, source } => DatasetError::Read { path, source },
            TemplateError::Format { path, message } => DatasetError::Format { path, message },
        }
    }
}

/// How the input lengths of chat requests were counted (written into the result).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ChatCounting {
    /// The template applied: its file (`tokenizer_config.json` or `chat_template.jinja`), or
    /// the server's `/tokenize` URL; `None` when no template was found and the raw user text
    /// was counted.
    pub chat_template: Option<String>,
    /// Prompts whose rendered length could not be made exactly the requested one.
    pub inexact_prompts: usize,
}

impl ChatCounting {
    /// A warning for the result and the log, when the counts are not what the server sees.
    pub fn warning(&self, tokenizer: &str) -> Option<String> {
        if self.chat_template.is_none() {
            return Some(format!(
                "no chat template found beside tokenizer {tokenizer} (tokenizer_config.json `chat_template` or chat_template.jinja): input lengths count the raw user text; the server sees the template's tokens too"
            ));
        }
        (self.inexact_prompts > 0).then(|| {
            format!(
                "{} chat prompts could not be cut to exactly the requested length; their input_lens are the verified rendered lengths",
                self.inexact_prompts
            )
        })
    }
}

/// How a chat conversation is counted: rendered here through the template and tokenized, or
/// by the server's `/tokenize` of `messages` (vLLM applies the chat template there).
enum Counter<'a> {
    Template(Box<ChatTemplate>),
    Server(&'a ServerTokenizer),
}

impl Counter<'_> {
    fn count(&self, tok: &Tokenizer, content: &str) -> Result<usize, DatasetError> {
        match self {
            Counter::Template(t) => tok.count(&t.render_user(content)?),
            Counter::Server(s) => s.count_chat(content),
        }
    }

    /// A trace's literal messages, as they are sent.
    fn count_messages(
        &self,
        tok: &Tokenizer,
        messages: &[(String, String)],
    ) -> Result<usize, DatasetError> {
        let messages: Vec<(&str, &str)> = messages
            .iter()
            .map(|(r, c)| (r.as_str(), c.as_str()))
            .collect();
        match self {
            Counter::Template(t) => tok.count(&t.render(&messages)?),
            Counter::Server(s) => s.count_messages(&messages),
        }
    }

    /// A conversation turn alone (its history is counted when it is sent): the user message
    /// after the session's system message, when it has one (the server's `/tokenize` counts
    /// the user message only).
    fn count_turn(
        &self,
        tok: &Tokenizer,
        system: Option<&str>,
        content: &str,
    ) -> Result<usize, DatasetError> {
        match (self, system) {
            (Counter::Template(t), Some(s)) => {
                tok.count(&t.render(&[("system", s), ("user", content)])?)
            }
            _ => self.count(tok, content),
        }
    }
}

/// Prompts for the chat endpoint: `prompts` (built for completions) re-measured through the
/// model's chat template (the local one beside `tokenizer.json`, or the server's through its
/// `/tokenize` of `messages`). With `exact`, each prompt's text is trimmed so that the rendered
/// conversation has exactly the `prompt_len` the dataset was asked for; otherwise the text is
/// kept and `prompt_len` becomes the rendered length. Without a template the prompts are
/// returned unchanged and the counting says so.
pub(super) fn fit(
    prompts: Vec<Prompt>,
    tok: &Tokenizer,
    exact: bool,
) -> Result<(Vec<Prompt>, ChatCounting), DatasetError> {
    let counter = match (tok.chat_template()?, tok.server()) {
        (Some(t), _) => Some(Counter::Template(Box::new(t))),
        // A server whose /tokenize does not take `messages` counts as having no template.
        (None, Some(s)) if s.count_chat("").is_ok() => Some(Counter::Server(s)),
        (None, _) => None,
    };
    let Some(counter) = counter else {
        return Ok((
            prompts,
            ChatCounting {
                chat_template: None,
                inexact_prompts: 0,
            },
        ));
    };
    let source = match &counter {
        Counter::Template(t) => t.source().display().to_string(),
        Counter::Server(s) => s.tokenize_url(),
    };
    let overhead = counter.count(tok, "")?;
    let mut inexact = 0;
    let mut out = Vec::with_capacity(prompts.len());
    // Datasets repeat prompts (shared prefixes, cycling): fit each distinct one once.
    let mut done: HashMap<String, Prompt> = HashMap::new();
    for p in prompts {
        if let Some(messages) = &p.messages {
            let n = counter.count_messages(tok, messages)?;
            out.push(Prompt {
                prompt_len: n as u32,
                ..p
            });
            continue;
        }
        if let Some(turn) = &p.session {
            let system = turn.system.as_deref();
            let n = counter.count_turn(tok, system, &p.text)?;
            out.push(Prompt {
                prompt_len: n as u32,
                ..p
            });
            continue;
        }
        if let Some(fitted) = done.get(&p.text) {
            out.push(fitted.clone());
            continue;
        }
        let original = p.text.clone();
        let (fitted, is_exact) = if exact {
            fit_one(p, tok, &counter, overhead)?
        } else {
            let n = counter.count(tok, &p.text)?;
            (
                Prompt {
                    prompt_len: n as u32,
                    ..p
                },
                true,
            )
        };
        if !is_exact {
            inexact += 1;
        }
        done.insert(original, fitted.clone());
        out.push(fitted);
    }
    Ok((
        out,
        ChatCounting {
            chat_template: Some(source),
            inexact_prompts: inexact,
        },
    ))
}

/// Trim `p.text` until the rendered conversation has `p.prompt_len` tokens. Returns the prompt
/// with its verified rendered length, and whether that is exact.
fn fit_one(
    p: Prompt,
    tok: &Tokenizer,
    counter: &Counter<'_>,
    overhead: usize,
) -> Result<(Prompt, bool), DatasetError> {
    let target = p.prompt_len as usize;
    let ids = tok.encode(&p.text)?;
    let mut content = target.saturating_sub(overhead).clamp(1, ids.len().max(1));
    let mut best: Option<(String, usize)> = None;
    for _ in 0..FITS {
        let (text, _) = cut_exact(tok, &ids, content)?;
        let n = counter.count(tok, &text)?;
        if n == target {
            return Ok((
                Prompt {
                    text,
                    prompt_len: n as u32,
                    output_len: p.output_len,
                    at_us: p.at_us,
                    session: p.session.clone(),
                    messages: None,
                },
                true,
            ));
        }
        if best
            .as_ref()
            .is_none_or(|(_, b)| b.abs_diff(target) > n.abs_diff(target))
        {
            best = Some((text, n));
        }
        let next = if n > target {
            content.saturating_sub(n - target).max(1)
        } else {
            (content + (target - n)).min(ids.len())
        };
        if next == content {
            break;
        }
        content = next;
    }
    let (text, n) = best.unwrap_or_default();
    Ok((
        Prompt {
            text,
            prompt_len: n as u32,
            output_len: p.output_len,
            at_us: p.at_us,
            session: p.session.clone(),
            messages: None,
        },
        false,
    ))
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    const SHIPPED: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/data/tokenizer/tokenizer.json");

    #[test]
    fn chat_prompts_render_to_exactly_the_requested_length() {
        use crate::dataset::{DatasetSpec, generate, generate_chat};
        let tok = Tokenizer::from_file(Path::new(SHIPPED)).unwrap();
        let spec = DatasetSpec::Random {
            input_len: 60,
            output_len: 4,
            range_ratio: 0.5,
            prefix_len: 5,
        };
        let (chat, counting) = generate_chat(&spec, &tok, 30, 7).unwrap();
        let source = counting.chat_template.clone().unwrap();
        assert!(
            source.ends_with("data/tokenizer/tokenizer_config.json"),
            "{source}"
        );
        assert_eq!(counting.inexact_prompts, 0);
        assert_eq!(counting.warning("t"), None);
        // Completions are built as before: the same seed gives the same requested lengths.
        let plain = generate(&spec, &tok, 30, 7).unwrap();
        let template = tok.chat_template().unwrap().unwrap();
        for (c, p) in plain.iter().zip(&chat) {
            assert_eq!(p.prompt_len, c.prompt_len);
            assert_eq!(p.output_len, c.output_len);
            assert_eq!(tok.count(&c.text).unwrap(), c.prompt_len as usize);
            // What the server tokenizes (the rendered conversation) has the requested length...
            let rendered = template.render_user(&p.text).unwrap();
            assert!(rendered.starts_with("<s><|im_start|>user\n"), "{rendered}");
            assert_eq!(tok.count(&rendered).unwrap(), c.prompt_len as usize);
            // ...so the user text itself is shorter by the template's tokens.
            assert!(tok.count(&p.text).unwrap() + 10 <= c.prompt_len as usize);
            assert!(c.text.starts_with(&p.text));
        }
    }

    #[test]
    fn data_without_a_requested_length_counts_the_rendered_text() {
        let tok = Tokenizer::from_file(Path::new(SHIPPED)).unwrap();
        let prompts = vec![Prompt {
            text: "ba be bi".into(),
            prompt_len: 3,
            output_len: 2,
            at_us: None,
            session: None,
            messages: None,
        }];
        let (fitted, _) = fit(prompts, &tok, false).unwrap();
        assert_eq!(fitted[0].text, "ba be bi");
        let rendered = tok
            .chat_template()
            .unwrap()
            .unwrap()
            .render_user("ba be bi");
        assert_eq!(
            fitted[0].prompt_len as usize,
            tok.count(&rendered.unwrap()).unwrap()
        );
        assert!(fitted[0].prompt_len > 3);
    }

    #[test]
    fn no_template_counts_raw_text_and_says_so() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::copy(SHIPPED, dir.path().join("tokenizer.json")).unwrap();
        let tok = Tokenizer::from_file(&dir.path().join("tokenizer.json")).unwrap();
        let prompts = vec![Prompt {
            text: "ba be bi".into(),
            prompt_len: 3,
            output_len: 2,
            at_us: None,
            session: None,
            messages: None,
        }];
        let (same, counting) = fit(prompts.clone(), &tok, true).unwrap();
        assert_eq!(same, prompts);
        assert_eq!(counting.chat_template, None);
        let w = counting.warning("tok.json").unwrap();
        assert!(
            w.contains("no chat template") && w.contains("tok.json"),
            "{w}"
        );
    }
}
