//! The validity verdict of a point as the manifest's `validity` field holds it: whether the
//! point is valid and each gate's name, threshold, observed value and verdict. Owns the
//! record and reading it back; judging a point is `crate::validity`'s.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The verdict on a point: valid when no gate failed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Validity {
    pub valid: bool,
    pub gates: Vec<Gate>,
}

/// One gate's outcome.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Gate {
    /// `completed`, `error_rate`, `output_tokens`, `input_len`, `output_len`, `concurrency`,
    /// `server_healthy`.
    pub name: String,
    /// What passing needs, as text: `>= 500`, `<= 1%`, `1000 ±10%`.
    pub threshold: String,
    /// The observed value (number, bool) or null when not measured.
    pub observed: Value,
    pub verdict: Verdict,
}

/// A gate's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Pass,
    Fail,
    /// The summary or plan lacks what the gate needs; neither a pass nor a failure.
    NotMeasured,
}

impl Validity {
    /// The failed gates.
    pub fn failures(&self) -> impl Iterator<Item = &Gate> {
        self.gates.iter().filter(|g| g.verdict == Verdict::Fail)
    }

    /// The JSON stored in the manifest's `validity` field.
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).expect("validity serializes")
    }
}
