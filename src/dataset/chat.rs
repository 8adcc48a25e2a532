//! Chat prompts of exact lengths. On the chat endpoint the server renders the model's chat
//! template around the user message (`<｜User｜>...<｜Assistant｜>`, BOS, role headers) and
//! tokenizes the result, so the input length it sees is longer than the raw text. This module
//! finds the template next to `tokenizer.json` (`tokenizer_config.json`'s `chat_template`, or a
//! `chat_template.jinja` file), renders it as Hugging Face does (minijinja with `trim_blocks`,
//! `lstrip_blocks`, loop controls and Python string methods) and trims each prompt's text until
//! the rendered conversation re-tokenizes to exactly the requested length.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use minijinja::{Environment, ErrorKind, context};
use serde::Serialize;
use serde_json::Value;

use super::server_tokenizer::ServerTokenizer;
use super::synth::cut_exact;
use super::{DatasetError, Prompt, Tokenizer};

/// Attempts at fitting one prompt before keeping the closest length.
const FITS: usize = 8;

/// A model's chat template, compiled once.
pub struct ChatTemplate {
    source: PathBuf,
    env: Environment<'static>,
    bos_token: String,
    eos_token: String,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

impl ChatTemplate {
    /// The template in `dir`: `tokenizer_config.json`'s `chat_template` (a string, or a list
    /// of named templates of which `default` is used), else `chat_template.jinja`. `None` when
    /// neither exists.
    pub fn find_in(dir: &Path) -> Result<Option<Self>, DatasetError> {
        let config_path = dir.join("tokenizer_config.json");
        let config: Value = match std::fs::read_to_string(&config_path) {
            Ok(raw) => serde_json::from_str(&raw).map_err(|e| DatasetError::Format {
                path: config_path.clone(),
                message: format!("line {}: not JSON: {e}", e.line()),
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Value::Null,
            Err(source) => {
                return Err(DatasetError::Read {
                    path: config_path,
                    source,
                });
            }
        };
        let special = |key: &str| -> String {
            match config.get(key) {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Object(o)) => o
                    .get("content")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
                _ => String::new(),
            }
        };
        let (bos_token, eos_token) = (special("bos_token"), special("eos_token"));
        let from_config = match config.get("chat_template") {
            None | Some(Value::Null) => None,
            Some(Value::String(t)) => Some(t.clone()),
            Some(Value::Array(named)) => named
                .iter()
                .find(|t| t.get("name").and_then(Value::as_str) == Some("default"))
                .or(named.first())
                .and_then(|t| t.get("template"))
                .and_then(Value::as_str)
                .map(str::to_string),
            Some(_) => {
                return Err(DatasetError::Format {
                    path: config_path,
                    message: "field `chat_template`: expected a string or a list of {name, template}; fix or remove it".into(),
                });
            }
        };
        let (source, template) = match from_config {
            Some(t) => (config_path, t),
            None => {
                let jinja = dir.join("chat_template.jinja");
                match std::fs::read_to_string(&jinja) {
                    Ok(t) => (jinja, t),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
                    Err(source) => {
                        return Err(DatasetError::Read {
                            path: jinja,
                            source,
                        });
                    }
                }
            }
        };
        Self::compile(source, template, bos_token, eos_token).map(Some)
    }

    /// Compile `template` (read from `source`) the way Hugging Face's `apply_chat_template` does.
    pub fn compile(
        source: PathBuf,
        template: String,
        bos_token: String,
        eos_token: String,
    ) -> Result<Self, DatasetError> {
        let mut env = Environment::new();
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", |message: String| -> Result<(), _> {
            Err(minijinja::Error::new(ErrorKind::InvalidOperation, message))
        });
        env.add_function("strftime_now", |format: String| {
            chrono::Local::now().format(&format).to_string()
        });
        env.add_template_owned("chat", template)
            .map_err(|e| template_error(&source, &e))?;
        Ok(ChatTemplate {
            source,
            env,
            bos_token,
            eos_token,
        })
    }

    /// Where the template was read from.
    pub fn source(&self) -> &Path {
        &self.source
    }

    /// The conversation the server tokenizes for one user message, with the generation prompt.
    pub fn render_user(&self, content: &str) -> Result<String, DatasetError> {
        self.render(&[("user", content)])
    }

    /// The conversation of `(role, content)` messages, with the generation prompt.
    pub fn render(&self, messages: &[(&str, &str)]) -> Result<String, DatasetError> {
        let template = self
            .env
            .get_template("chat")
            .map_err(|e| template_error(&self.source, &e))?;
        let messages: Vec<_> = messages
            .iter()
            .map(|(role, content)| context! { role => role, content => content })
            .collect();
        template
            .render(context! {
                messages => messages,
                add_generation_prompt => true,
                bos_token => &self.bos_token,
                eos_token => &self.eos_token,
            })
            .map_err(|e| template_error(&self.source, &e))
    }
}

fn template_error(source: &Path, e: &minijinja::Error) -> DatasetError {
    let line = e.line().map_or(String::new(), |l| format!("line {l} of "));
    DatasetError::Format {
        path: source.to_path_buf(),
        message: format!(
            "{line}field `chat_template`: {e}; fix the template, or pass --tokenizer pointing at a directory with a working one"
        ),
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
}

/// Prompts for the chat endpoint: `prompts` (built for completions) re-measured through the
/// model's chat template (the local one beside `tokenizer.json`, or the server's through its
/// `/tokenize` of `messages`). With `exact`, each prompt's text is trimmed so that the rendered
/// conversation has exactly the `prompt_len` the dataset was asked for; otherwise the text is
/// kept and `prompt_len` becomes the rendered length. Without a template the prompts are
/// returned unchanged and the counting says so.
pub fn fit(
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
        },
        false,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn template(t: &str) -> ChatTemplate {
        ChatTemplate::compile(
            PathBuf::from("tokenizer_config.json"),
            t.into(),
            "<s>".into(),
            "</s>".into(),
        )
        .unwrap()
    }

    #[test]
    fn renders_like_hugging_face() {
        // trim_blocks/lstrip_blocks, Python string methods, bos_token, add_generation_prompt.
        let t = template(
            "{{ bos_token }}\n{% for m in messages %}\n  {% if m.content.startswith('x') %}{{ raise_exception('no x') }}{% endif %}\n[{{ m.role.upper() }}] {{ m['content'].strip() }}\n{% endfor %}\n{% if add_generation_prompt %}[ASSISTANT]{% endif %}",
        );
        // Same output as Python jinja2 with HF's settings.
        assert_eq!(
            t.render_user("  hi  ").unwrap(),
            "<s>\n[USER] hi\n[ASSISTANT]"
        );
        let e = t.render_user("xyz").unwrap_err().to_string();
        assert!(
            e.contains("no x") && e.contains("tokenizer_config.json"),
            "{e}"
        );
    }

    #[test]
    fn broken_templates_name_the_file_and_field() {
        let e = ChatTemplate::compile(
            PathBuf::from("/m/tokenizer_config.json"),
            "{% for %}".into(),
            String::new(),
            String::new(),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("/m/tokenizer_config.json"), "{e}");
        assert!(e.contains("chat_template"), "{e}");
        assert!(e.contains("line 1"), "{e}");
    }

    #[test]
    fn finds_named_templates_and_jinja_files() {
        let dir = tempfile::tempdir().unwrap();
        assert!(ChatTemplate::find_in(dir.path()).unwrap().is_none());
        std::fs::write(
            dir.path().join("chat_template.jinja"),
            "J{{ messages[0].content }}",
        )
        .unwrap();
        let t = ChatTemplate::find_in(dir.path()).unwrap().unwrap();
        assert_eq!(t.render_user("a").unwrap(), "Ja");
        std::fs::write(
            dir.path().join("tokenizer_config.json"),
            r#"{"bos_token": {"content": "B"}, "chat_template": [
                {"name": "tool_use", "template": "T"},
                {"name": "default", "template": "{{ bos_token }}D{{ messages[0].content }}"}]}"#,
        )
        .unwrap();
        let t = ChatTemplate::find_in(dir.path()).unwrap().unwrap();
        assert_eq!(t.render_user("a").unwrap(), "BDa");
        assert!(t.source().ends_with("tokenizer_config.json"));
        std::fs::write(dir.path().join("tokenizer_config.json"), "{\n\"a\": }").unwrap();
        let e = ChatTemplate::find_in(dir.path()).unwrap_err().to_string();
        assert!(
            e.contains("tokenizer_config.json") && e.contains("line 2"),
            "{e}"
        );
    }

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
