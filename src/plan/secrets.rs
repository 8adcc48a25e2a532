//! Secrets: `${{ secrets.NAME }}` in env values, looked up in orchestrate's environment when
//! the plan is built, kept out of template rendering by placeholders, and carried as
//! `EnvValue::Secret` so every printed or written form shows `***`; env entries whose *name*
//! looks secret ([`looks_secret`]: `HF_TOKEN`, `OPENAI_API_KEY`, ...) are carried the same way.
//!
//! Every secret value the plan resolves is also registered with this process's redactor
//! ([`redact`], [`redact_json`], [`Redacting`]), which every output path goes through: the
//! instance logs (`provider::logs`), the archive's JSON files and requests.jsonl, stderr
//! (logging, `-v` included, and the final error). Values shorter than [`MIN_REDACTED_LEN`]
//! characters are not searched for in free text (they would match ordinary words); they are
//! still `***` wherever an env listing shows them.

use std::borrow::Cow;
use std::sync::RwLock;

use serde_saphyr::Spanned;

use super::render::Builder;
use super::types::{EnvValue, PlanError};
use crate::spec::TASK_SOURCE;

/// Opens a secret reference.
pub(super) const SECRET_OPEN: &str = "${{";

/// One env entry after secret resolution: the template with secrets as placeholders.
pub(super) struct EnvTemplate {
    pub name: String,
    pub value: Spanned<String>,
    pub secrets: Vec<(String, String)>,
}

impl Builder<'_> {
    /// Replace `${{ secrets.NAME }}` in env values by placeholders and look the values up.
    pub(super) fn resolve_secrets(
        &self,
        env: &[crate::spec::values::EnvEntry],
    ) -> Result<Vec<EnvTemplate>, PlanError> {
        let mut out = Vec::new();
        for e in env {
            let mut text = String::new();
            let mut rest = e.value.value.as_str();
            let mut secrets = Vec::new();
            while let Some(start) = rest.find(SECRET_OPEN) {
                text.push_str(&rest[..start]);
                let after = &rest[start + SECRET_OPEN.len()..];
                let Some(end) = after.find("}}") else {
                    return Err(self
                        .at(
                            TASK_SOURCE,
                            e.value.referenced,
                            format!("unclosed `${{{{` in env `{}`", e.name),
                        )
                        .with_help("write ${{ secrets.NAME }}")
                        .into());
                };
                let inner = after[..end].trim();
                let Some(sname) = inner.strip_prefix("secrets.").map(str::trim) else {
                    return Err(self
                        .at(
                            TASK_SOURCE,
                            e.value.referenced,
                            format!("`${{{{ {inner} }}}}` is not a secret reference"),
                        )
                        .with_help("write ${{ secrets.NAME }}")
                        .into());
                };
                let value = std::env::var(sname).map_err(|_| {
                    self.at(
                        TASK_SOURCE,
                        e.value.referenced,
                        format!("secret `{sname}` is not set"),
                    )
                    .with_help(format!(
                        "export {sname}=... in the environment that runs orchestrate"
                    ))
                })?;
                text.push_str(&placeholder(sname));
                register(&value);
                secrets.push((sname.to_string(), value));
                rest = &after[end + 2..];
            }
            text.push_str(rest);
            out.push(EnvTemplate {
                name: e.name.clone(),
                value: Spanned {
                    value: text,
                    referenced: e.value.referenced,
                    defined: e.value.defined,
                },
                secrets,
            });
        }
        Ok(out)
    }
}

/// Stands for secret `name` inside a template until the value is put back.
pub(super) fn placeholder(name: &str) -> String {
    format!("\u{1}secret:{name}\u{1}")
}

/// Words of an env name that mark its value as a secret (the name is split at `_`, `-`, `.`
/// and compared case-insensitively): `HF_TOKEN`, `OPENAI_API_KEY`, `AWS_SECRET_ACCESS_KEY`,
/// `DB_PASSWORD`, `HUGGING_FACE_HUB_TOKEN`, ... but not `MAX_NUM_TOKENS`.
const SECRET_WORDS: &[&str] = &[
    "TOKEN",
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "KEY",
    "APIKEY",
    "CREDENTIAL",
    "CREDENTIALS",
    "AUTH",
    "AUTHORIZATION",
];

/// Whether an env variable's name says its value is a secret.
fn looks_secret(name: &str) -> bool {
    name.split(['_', '-', '.'])
        .any(|word| SECRET_WORDS.iter().any(|w| word.eq_ignore_ascii_case(w)))
}

/// A plain env value: a secret (registered, shown as `***`) when its name looks secret.
pub(super) fn by_name(name: &str, value: String) -> EnvValue {
    if looks_secret(name) && !value.is_empty() {
        register(&value);
        EnvValue::Secret {
            name: name.to_string(),
            value,
        }
    } else {
        EnvValue::Plain(value)
    }
}

/// Shortest value the redactor searches for in free text.
const MIN_REDACTED_LEN: usize = 6;

/// Secret values known to this process, longest first (so a secret that contains another is
/// replaced whole), each with its JSON-escaped form when that differs.
static KNOWN: RwLock<Vec<String>> = RwLock::new(Vec::new());

/// Redact `value` from every output of this process from now on.
pub fn register(value: &str) {
    if value.chars().count() < MIN_REDACTED_LEN {
        return;
    }
    let escaped = serde_json::to_string(value).expect("a string serializes");
    let escaped = &escaped[1..escaped.len() - 1];
    let mut known = KNOWN.write().unwrap_or_else(|p| p.into_inner());
    for form in [value, escaped] {
        if !known.iter().any(|k| k == form) {
            known.push(form.to_string());
        }
    }
    known.sort_by_key(|k| std::cmp::Reverse(k.len()));
}

/// `text` with every registered secret value replaced by `***`.
pub fn redact(text: &str) -> Cow<'_, str> {
    let known = KNOWN.read().unwrap_or_else(|p| p.into_inner());
    let mut out = Cow::Borrowed(text);
    for secret in known.iter() {
        if out.contains(secret.as_str()) {
            out = Cow::Owned(out.replace(secret.as_str(), super::types::REDACTED));
        }
    }
    out
}

/// Raw output with every registered secret value replaced by `***`; bytes that are not
/// UTF-8 are kept as they are unless the line holds a secret.
pub fn redact_bytes(bytes: &[u8]) -> Cow<'_, [u8]> {
    if KNOWN.read().unwrap_or_else(|p| p.into_inner()).is_empty() {
        return Cow::Borrowed(bytes);
    }
    match redact(&String::from_utf8_lossy(bytes)) {
        Cow::Borrowed(_) => Cow::Borrowed(bytes),
        Cow::Owned(clean) => Cow::Owned(clean.into_bytes()),
    }
}

/// Redact every string (keys too) of a JSON value in place.
pub fn redact_json(value: &mut serde_json::Value) {
    if KNOWN.read().unwrap_or_else(|p| p.into_inner()).is_empty() {
        return;
    }
    walk(value);
}

fn walk(value: &mut serde_json::Value) {
    use serde_json::Value;
    match value {
        Value::String(s) => {
            if let Cow::Owned(r) = redact(s) {
                *s = r;
            }
        }
        Value::Array(items) => items.iter_mut().for_each(walk),
        Value::Object(map) => {
            let leaks = map.keys().any(|k| matches!(redact(k), Cow::Owned(_)));
            if leaks {
                let old = std::mem::take(map);
                for (k, mut v) in old {
                    walk(&mut v);
                    map.insert(redact(&k).into_owned(), v);
                }
            } else {
                map.values_mut().for_each(walk);
            }
        }
        _ => {}
    }
}

/// A writer that redacts registered secrets from what passes through it (stderr logging).
/// Each `write` is redacted on its own: a secret split over two writes is not caught, so wrap
/// writers that write whole lines or messages at once (tracing's formatter does).
pub struct Redacting<W>(pub W);

impl<W: std::io::Write> std::io::Write for Redacting<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.write_all(&redact_bytes(buf))?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    #[test]
    fn names_that_look_secret() {
        for name in [
            "HF_TOKEN",
            "HUGGING_FACE_HUB_TOKEN",
            "OPENAI_API_KEY",
            "AWS_SECRET_ACCESS_KEY",
            "db_password",
            "AUTH",
            "my-api.key",
        ] {
            assert!(looks_secret(name), "{name}");
        }
        for name in [
            "MAX_NUM_TOKENS",
            "TOKENIZERS_PARALLELISM",
            "CUDA_VISIBLE_DEVICES",
            "KEYS",
            "MONKEY",
            "VLLM_USE_V1",
        ] {
            assert!(!looks_secret(name), "{name}");
        }
    }

    #[test]
    fn registered_values_are_redacted_everywhere() {
        register("unit-secret-7f3a9c\\q");
        register("abc");
        let text = "token=unit-secret-7f3a9c\\q; abc stays";
        assert_eq!(redact(text), "token=***; abc stays");
        let mut value = serde_json::json!({
            "error": "echo unit-secret-7f3a9c\\q",
            "list": ["unit-secret-7f3a9c\\q"],
            "unit-secret-7f3a9c\\q": 1,
        });
        redact_json(&mut value);
        let text = value.to_string();
        assert!(!text.contains("unit-secret-7f3a9c"), "{text}");
        // The JSON-escaped form is known too (a JSON line written as text).
        let line =
            serde_json::to_string(&serde_json::json!({"e": "x unit-secret-7f3a9c\\q"})).unwrap();
        assert!(!redact(&line).contains("unit-secret-7f3a9c"), "{line}");
        let mut out = Redacting(Vec::new());
        out.write_all(b"Env: [\"HF_TOKEN=unit-secret-7f3a9c\\\\q\"]\n")
            .unwrap();
        assert_eq!(
            String::from_utf8(out.0).unwrap(),
            "Env: [\"HF_TOKEN=***\"]\n"
        );
    }
}
