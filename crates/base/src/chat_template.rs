//! A model's chat template, as Hugging Face applies it: found next to `tokenizer.json`
//! (`tokenizer_config.json`'s `chat_template`, or a `chat_template.jinja` file) and rendered
//! with minijinja under `trim_blocks`, `lstrip_blocks`, loop controls and Python string
//! methods. The dataset fits chat prompts through it; the mock server counts chat prompts
//! through it.

use std::path::{Path, PathBuf};

use minijinja::{Environment, ErrorKind, context};
use serde_json::Value;

/// Why a chat template could not be read, compiled or rendered. The messages are the
/// dataset's (`orchestrate`'s `DatasetError` takes these variants over unchanged).
#[derive(Debug, thiserror::Error)]
pub enum TemplateError {
    #[error("cannot read dataset {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("dataset {path}: {message}")]
    Format { path: PathBuf, message: String },
}

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
    pub fn find_in(dir: &Path) -> Result<Option<Self>, TemplateError> {
        let config_path = dir.join("tokenizer_config.json");
        let config: Value = match std::fs::read_to_string(&config_path) {
            Ok(raw) => serde_json::from_str(&raw).map_err(|e| TemplateError::Format {
                path: config_path.clone(),
                message: format!("line {}: not JSON: {e}", e.line()),
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Value::Null,
            Err(source) => {
                return Err(TemplateError::Read {
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
                return Err(TemplateError::Format {
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
                        return Err(TemplateError::Read {
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
    ) -> Result<Self, TemplateError> {
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
    pub fn render_user(&self, content: &str) -> Result<String, TemplateError> {
        self.render(&[("user", content)])
    }

    /// The conversation of `(role, content)` messages, with the generation prompt.
    pub fn render(&self, messages: &[(&str, &str)]) -> Result<String, TemplateError> {
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

fn template_error(source: &Path, e: &minijinja::Error) -> TemplateError {
    let line = e.line().map_or(String::new(), |l| format!("line {l} of "));
    TemplateError::Format {
        path: source.to_path_buf(),
        message: format!(
            "{line}field `chat_template`: {e}; fix the template, or pass --tokenizer pointing at a directory with a working one"
        ),
    }
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
}
