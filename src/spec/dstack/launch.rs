//! What a dstack file leaves to its launch command and file name: the server dialect and
//! the model a launch command names (filled in with a note), a flag's value, and the task
//! name a file name gives.

use std::path::Path;

use serde_saphyr::{Location, Spanned};

use super::keys::Note;
use crate::load::Backend;
use crate::spec::types::TaskSpec;
use crate::spec::values::EnvEntry;

/// The task name a file gives when it has no `name:`: its file name without
/// `.dstack.yml`/`.yaml`/`.yml`, other characters than letters, digits, `-`, `_`, `.` as `-`.
pub(super) fn name_from_path(path: &Path) -> String {
    let file = path
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default();
    let stem = [".dstack.yml", ".dstack.yaml", ".yaml", ".yml"]
        .iter()
        .find_map(|s| file.strip_suffix(s))
        .unwrap_or(&file);
    // `.dstack.yml` alone is dstack's default file name: take the directory's name.
    let stem = if stem.is_empty() {
        path.parent()
            .and_then(|p| p.canonicalize().ok())
            .and_then(|p| p.file_name().map(|f| f.to_string_lossy().into_owned()))
            .unwrap_or_else(|| "task".to_string())
    } else {
        stem.to_string()
    };
    stem.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '-'
            }
        })
        .collect()
}

/// The server dialect a launch command names (`vllm serve`, `sglang.launch_server`,
/// `trtllm-serve`), for dstack files that do not say `backend:`.
pub(super) fn backend_from_commands(commands: &[Spanned<String>]) -> Option<Backend> {
    commands.iter().find_map(|c| {
        let c = c.value.as_str();
        if c.contains("sglang.launch_server") || c.contains("sglang serve") {
            Some(Backend::Sglang)
        } else if c.contains("vllm serve") || c.contains("vllm.entrypoints") {
            Some(Backend::Vllm)
        } else if c.contains("trtllm-serve") {
            Some(Backend::Trtllm)
        } else {
            None
        }
    })
}

/// The model a launch command serves: `--model X`, `--model-path X`, `vllm serve X`,
/// `trtllm-serve [flags] X`, with `$VAR`/`${VAR}` taken from the file's env.
pub(super) fn model_from_commands(
    commands: &[Spanned<String>],
    env: &[EnvEntry],
) -> Option<(String, Location)> {
    for c in commands {
        let words: Vec<&str> = c.value.split_whitespace().collect();
        let found = words.iter().enumerate().find_map(|(i, w)| {
            if let Some(v) = ["--model=", "--model-path=", "--model_path="]
                .iter()
                .find_map(|p| w.strip_prefix(p))
            {
                return Some(v.to_string());
            }
            let next = words.get(i + 1).copied();
            match *w {
                "--model" | "--model-path" | "--model_path" => next.map(str::to_string),
                "serve" if i > 0 && words[i - 1].ends_with("vllm") => {
                    next.filter(|n| !n.starts_with('-')).map(str::to_string)
                }
                "trtllm-serve" => positional(&words[i + 1..]),
                _ => None,
            }
        });
        if let Some(m) = found.and_then(|m| expand(&m, env)) {
            return Some((m, c.referenced));
        }
    }
    None
}

/// The value of `flag` in the first command that writes it (`--flag value` or
/// `--flag=value`), e.g. SGLang's `--disaggregation-mode prefill`.
pub(super) fn flag_value(commands: &[Spanned<String>], flag: &str) -> Option<(String, Location)> {
    let with_eq = format!("{flag}=");
    commands.iter().find_map(|c| {
        let words: Vec<&str> = c.value.split_whitespace().collect();
        words.iter().enumerate().find_map(|(i, w)| {
            if let Some(v) = w.strip_prefix(&with_eq) {
                return Some((v.to_string(), c.referenced));
            }
            (*w == flag)
                .then(|| words.get(i + 1))
                .flatten()
                .filter(|v| !v.starts_with('-'))
                .map(|v| (v.to_string(), c.referenced))
        })
    })
}

/// `backend` and `model` from `commands` (`whose` they are, for the notes, under `key`),
/// when the file does not say them.
pub(super) fn infer_from(
    spec: &mut TaskSpec,
    commands: &[Spanned<String>],
    key: &str,
    whose: &str,
    notes: &mut Vec<Note>,
) {
    if spec.backend.is_none()
        && let Some(b) = backend_from_commands(commands)
    {
        spec.backend = Some(b);
        let name = serde_json::to_value(b)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        notes.push(Note {
            key: key.into(),
            line: commands.first().map_or(0, |c| c.referenced.line()),
            honored: true,
            text: format!("{whose} is {name}'s: `backend: {name}`"),
        });
    }
    if spec.model.is_none()
        && spec.benchmark.model.is_none()
        && let Some((model, loc)) = model_from_commands(commands, &spec.env.0)
    {
        notes.push(Note {
            key: key.into(),
            line: loc.line(),
            honored: true,
            text: format!("{whose} serves `{model}`: `model: {model}`"),
        });
        spec.model = Some(Spanned {
            value: model,
            referenced: loc,
            defined: loc,
        });
    }
}

/// The first word of `args` that is neither a flag nor a flag's value.
fn positional(args: &[&str]) -> Option<String> {
    let mut i = 0;
    while i < args.len() {
        let w = args[i];
        if w.starts_with("--") {
            i += if w.contains('=') { 1 } else { 2 };
        } else if w.starts_with('-') || w.contains('=') || w == "\\" {
            i += 1;
        } else {
            return Some(w.to_string());
        }
    }
    None
}

/// `$NAME`/`${NAME}` from the file's env; `None` when the value is not known here.
fn expand(word: &str, env: &[EnvEntry]) -> Option<String> {
    let word = word.trim_matches(|c| c == '"' || c == '\'');
    let Some(var) = word.strip_prefix('$') else {
        return (!word.contains('$') && !word.contains("{{")).then(|| word.to_string());
    };
    let var = var.trim_start_matches('{').trim_end_matches('}');
    env.iter()
        .find(|e| e.name == var && !e.value.value.contains("${{"))
        .map(|e| e.value.value.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(c: &str) -> Vec<Spanned<String>> {
        vec![Spanned {
            value: c.to_string(),
            referenced: Location::UNKNOWN,
            defined: Location::UNKNOWN,
        }]
    }

    #[test]
    fn the_model_follows_from_the_launch_command() {
        let m = |c: &str| model_from_commands(&words(c), &[]).map(|m| m.0);
        assert_eq!(
            m("python3 -m sglang.launch_server --model deepseek-ai/DeepSeek-R1 --tp 8").as_deref(),
            Some("deepseek-ai/DeepSeek-R1")
        );
        assert_eq!(m("vllm serve org/m --tp 8").as_deref(), Some("org/m"));
        assert_eq!(
            m("trtllm-serve --backend pytorch --tp_size $N --pp_size 1 deepseek").as_deref(),
            Some("deepseek")
        );
        assert_eq!(
            m("python3 -m sglang.launch_server --model-path $MODEL_ID"),
            None
        );
        assert_eq!(m("echo hello"), None);
    }

    #[test]
    fn the_backend_follows_from_the_launch_command() {
        assert_eq!(
            backend_from_commands(&words("vllm serve m")),
            Some(Backend::Vllm)
        );
        assert_eq!(
            backend_from_commands(&words("python3 -m sglang.launch_server --model m")),
            Some(Backend::Sglang)
        );
        assert_eq!(
            backend_from_commands(&words("trtllm-serve m")),
            Some(Backend::Trtllm)
        );
        assert_eq!(backend_from_commands(&words("sleep 1")), None);
    }

    #[test]
    fn names_come_from_the_file_name() {
        assert_eq!(
            name_from_path(Path::new("a/vllm-h200.dstack.yml")),
            "vllm-h200"
        );
        assert_eq!(name_from_path(Path::new("serve me.yaml")), "serve-me");
    }
}
