//! Short excerpts of what a server said, for errors: the last lines of its log as an
//! indented block, and answers cut to a few hundred characters.

use crate::provider::Instance;

/// Lines of log shown when a server dies or never becomes ready.
pub const TAIL_LINES: usize = 40;

/// The last [`TAIL_LINES`] lines of `instance`'s log as the errors show them.
pub(super) fn tail(instance: &dyn Instance) -> String {
    tail_text(&instance.log().tail(TAIL_LINES))
}

/// Log lines as the indented block the errors show (`(no output)` when there are none).
pub fn tail_text(lines: &[String]) -> String {
    if lines.is_empty() {
        "  (no output)".to_string()
    } else {
        lines
            .iter()
            .map(|l| format!("  | {l}"))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

pub(super) fn truncate(s: &str, n: usize) -> &str {
    match s.char_indices().nth(n) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}
