//! Errors a user can act on: `file:line:col`, the offending line with a caret, and a hint
//! ("did you mean `concurrency`?"). Built from serde-saphyr errors and from resolver checks.
//!
//! Owns: the error type of the task file and its rendering. Does not own: what is checked.

use std::fmt;
use std::path::{Path, PathBuf};

use serde_saphyr::Location;

/// One located problem in a task or profile file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    pub file: PathBuf,
    /// 1-based; 0 when unknown.
    pub line: u64,
    /// 1-based; 0 when unknown.
    pub column: u64,
    pub message: String,
    /// The offending line with a caret underneath (empty when the location is unknown).
    pub snippet: String,
    /// What to do about it.
    pub help: Option<String>,
}

impl Diagnostic {
    /// A diagnostic at `loc` in `text` (the content of `file`).
    pub fn at(file: &Path, text: &str, loc: Location, message: impl Into<String>) -> Self {
        let (line, column) = (loc.line(), loc.column());
        let len = (loc.span().len() as usize).max(1);
        Self {
            file: file.to_path_buf(),
            line,
            column,
            message: message.into(),
            snippet: snippet(text, line, column, len),
            help: None,
        }
    }

    /// A diagnostic about the whole file (no line).
    pub fn file(file: &Path, message: impl Into<String>) -> Self {
        Self {
            file: file.to_path_buf(),
            line: 0,
            column: 0,
            message: message.into(),
            snippet: String::new(),
            help: None,
        }
    }

    pub fn with_help(mut self, help: impl Into<String>) -> Self {
        self.help = Some(help.into());
        self
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line > 0 {
            write!(
                f,
                "{}:{}:{}: {}",
                self.file.display(),
                self.line,
                self.column,
                self.message
            )?;
        } else {
            write!(f, "{}: {}", self.file.display(), self.message)?;
        }
        if !self.snippet.is_empty() {
            write!(f, "\n{}", self.snippet)?;
        }
        if let Some(help) = &self.help {
            write!(f, "\n  = help: {help}")?;
        }
        Ok(())
    }
}

/// Errors loading or resolving a task file; each names the file (and line when known).
#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    #[error("cannot read {}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    Invalid(Box<Diagnostic>),
}

impl From<Diagnostic> for SpecError {
    fn from(d: Diagnostic) -> Self {
        SpecError::Invalid(Box::new(d))
    }
}

/// The widest source line a snippet shows whole; a longer one is cut to a window of this
/// many characters around the column, `…` marking what was left out.
const SNIPPET_WIDTH: usize = 200;

/// Render the line `line` of `text` with a caret under `len` characters from `column`.
fn snippet(text: &str, line: u64, column: u64, len: usize) -> String {
    let Some(src) = (line as usize)
        .checked_sub(1)
        .and_then(|i| text.lines().nth(i))
    else {
        return String::new();
    };
    let number = line.to_string();
    let pad = " ".repeat(number.len());
    let mut start = (column as usize).saturating_sub(1);
    let width = src.chars().count();
    let mut shown: String = src.to_string();
    let mut tail_len = 0;
    if width > SNIPPET_WIDTH {
        // Keep a little context before the column, and mark both cuts.
        let from = start
            .saturating_sub(20)
            .min(width.saturating_sub(SNIPPET_WIDTH));
        let body: String = src.chars().skip(from).take(SNIPPET_WIDTH).collect();
        let head = if from > 0 { "…" } else { "" };
        let tail = if from + SNIPPET_WIDTH < width {
            "…"
        } else {
            ""
        };
        shown = format!("{head}{body}{tail}");
        start = start - from + head.chars().count();
        tail_len = tail.chars().count();
    }
    let shown_width = shown.chars().count() - tail_len;
    let len = len.min(shown_width.saturating_sub(start)).max(1);
    format!(
        "{pad} |\n{number} | {shown}\n{pad} | {}{}",
        " ".repeat(start),
        "^".repeat(len)
    )
}

/// The candidate closest to `word`, if it is close enough to be a plausible typo.
pub fn did_you_mean<'a>(
    word: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    candidates
        .into_iter()
        .map(|c| (c, strsim::normalized_damerau_levenshtein(word, c)))
        .filter(|(_, score)| *score >= 0.6)
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(c, _)| c)
}

/// Help text for an unknown name: the near candidate, else the list of valid ones.
pub fn suggest(word: &str, candidates: &[&str]) -> String {
    match did_you_mean(word, candidates.iter().copied()) {
        Some(near) => format!("did you mean `{near}`?"),
        None => format!("expected one of: {}", candidates.join(", ")),
    }
}

/// Turn a serde-saphyr error into a diagnostic for `file`.
pub fn from_yaml(file: &Path, text: &str, err: &serde_saphyr::Error) -> Diagnostic {
    use serde_saphyr::Error as E;
    let inner = err.without_snippet();
    let loc = inner.location().unwrap_or(Location::UNKNOWN);
    let (message, help) = match inner {
        E::SerdeUnknownField {
            field, expected, ..
        } => (
            format!("unknown key `{field}`"),
            Some(suggest(field, expected)),
        ),
        E::SerdeUnknownVariant {
            variant, expected, ..
        } => (
            format!("unknown value `{variant}`"),
            Some(suggest(variant, expected)),
        ),
        E::SerdeMissingField { field, .. } => (
            format!("missing required key `{field}`"),
            Some(format!(
                "add `{field}:` to the mapping this line belongs to"
            )),
        ),
        E::SerdeInvalidType {
            unexpected,
            expected,
            ..
        } => (format!("expected {expected}, found {unexpected}"), None),
        E::SerdeInvalidValue {
            unexpected,
            expected,
            ..
        } => (format!("expected {expected}, found {unexpected}"), None),
        E::Message { msg, .. } => (msg.clone(), None),
        E::DuplicateMappingKey { key, .. } => (
            match key {
                Some(k) => format!("key `{k}` appears twice in this mapping"),
                None => "a key appears twice in this mapping".to_string(),
            },
            Some("keep one of them".to_string()),
        ),
        E::NullIntoString { .. } | E::InvalidCharNull { .. } => (
            "this key has no value".to_string(),
            Some("write a value after the colon, or remove the key".to_string()),
        ),
        E::Budget { .. } => (
            "the YAML has too many nodes, anchors, aliases or levels of nesting for a task file"
                .to_string(),
            Some("a task file is a page of YAML; shorten it or split it into tasks".to_string()),
        ),
        other => (strip_location(&other.to_string()), None),
    };
    let help = help.or_else(|| type_help(&message));
    let message = match (message.strip_prefix("invalid "), span_text(text, loc)) {
        (Some(ty), Some(found)) if !ty.contains(' ') => {
            format!("`{found}` is not a valid {}", type_name(ty))
        }
        _ => message,
    };
    let mut d = if loc.line() > 0 {
        Diagnostic::at(file, text, loc, message)
    } else {
        Diagnostic::file(file, message)
    };
    d.help = help;
    d
}

/// The source text a location spans (on one line).
fn span_text(text: &str, loc: Location) -> Option<String> {
    let line = text.lines().nth((loc.line() as usize).checked_sub(1)?)?;
    let start = (loc.column() as usize).checked_sub(1)?;
    let len = loc.span().len() as usize;
    let mut found: String = line.chars().skip(start).take(len.min(60)).collect();
    if len > 60 && found.chars().count() == 60 {
        found.push('…');
    }
    (!found.is_empty()).then_some(found)
}

/// A Rust scalar type as users say it.
fn type_name(ty: &str) -> String {
    match ty {
        "bool" | "boolean" => "boolean".into(),
        "u8" | "u16" | "u32" | "u64" | "usize" => format!("whole number ({ty})"),
        "i8" | "i16" | "i32" | "i64" | "isize" => format!("integer ({ty})"),
        "f32" | "f64" => "number".into(),
        other => other.into(),
    }
}

/// What to write instead of a scalar of the wrong type.
fn type_help(message: &str) -> Option<String> {
    let m = message.to_ascii_lowercase();
    let what = if m.contains("bool") {
        "write true or false"
    } else if ["u8", "u16", "u32", "u64", "i32", "i64", "integer"]
        .iter()
        .any(|t| m.contains(t))
    {
        "write a whole number"
    } else if m.contains("f64") || m.contains("float") {
        "write a number"
    } else {
        return None;
    };
    Some(what.to_string())
}

/// serde-saphyr's plain messages end in " at line L, column C"; we print the location first.
fn strip_location(msg: &str) -> String {
    let msg = msg.strip_prefix("error: ").unwrap_or(msg);
    let msg = match msg.find(" at line ") {
        Some(i) => &msg[..i],
        None => msg,
    };
    msg.lines().next().unwrap_or_default().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_null_string_is_described_without_library_words() {
        #[derive(Debug, serde::Deserialize)]
        struct T {
            #[expect(dead_code, reason = "only the error matters")]
            name: String,
        }
        let text = "name: ~\n";
        let err = serde_saphyr::from_str::<T>(text).unwrap_err();
        let d = from_yaml(Path::new("t.yaml"), text, &err).to_string();
        assert!(d.contains("this key has no value"), "{d}");
        assert!(!d.contains("Option<"), "{d}");
    }

    #[test]
    fn near_names_are_suggested_and_far_ones_are_not() {
        let keys = ["concurrency", "duration", "num_prompts"];
        assert_eq!(did_you_mean("concurency", keys), Some("concurrency"));
        assert_eq!(did_you_mean("num_prompt", keys), Some("num_prompts"));
        assert_eq!(did_you_mean("zebra", keys), None);
        assert_eq!(
            suggest("zebra", &keys),
            "expected one of: concurrency, duration, num_prompts"
        );
    }

    #[test]
    fn snippet_underlines_the_span() {
        let s = snippet("a: 1\nbench:\n  concurency: 3\n", 3, 3, 10);
        assert_eq!(s, "  |\n3 |   concurency: 3\n  |   ^^^^^^^^^^");
    }

    #[test]
    fn a_long_line_is_cut_around_the_column() {
        let text = format!("address: {}\n", "x".repeat(100_000));
        let s = snippet(&text, 1, 10, 100_000);
        let lines: Vec<&str> = s.lines().collect();
        assert_eq!(lines[1], format!("1 | address: {}…", "x".repeat(191)));
        assert_eq!(lines[2], format!("  |          {}", "^".repeat(191)));
        // Far along the line, both ends are cut and the caret stays under the column.
        let s = snippet(&text, 1, 5_000, 1);
        let lines: Vec<&str> = s.lines().collect();
        assert_eq!(lines[1], format!("1 | …{}…", "x".repeat(200)));
        assert_eq!(lines[2], format!("  | {}^", " ".repeat(21)));
    }
}
