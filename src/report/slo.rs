//! Percentile SLOs as reports judge points by them: which SLOs apply (`--slo`, else the
//! union of the runs' capacity searches' percentile SLOs), the summary key each reads
//! (`p99_tpot_ms`), and a point's verdict: yes, no, or unknown when its summary lacks a key.

use serde::Serialize;

use super::data::{Row, Run};
use crate::load::search::PercentileSlo;
use crate::metrics::percentile_key;

/// Whether a point meets every SLO.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Meets {
    Yes,
    No,
    /// Some SLO's percentile is not in the point's summary (and none failed).
    Unknown,
}

impl Meets {
    /// `yes`, `no`, `unknown`.
    pub fn text(self) -> &'static str {
        match self {
            Meets::Yes => "yes",
            Meets::No => "no",
            Meets::Unknown => "unknown",
        }
    }
}

/// `given` when not empty, else the union of the percentile SLOs of the runs' capacity
/// searches; and where they came from.
pub(super) fn slos_for(
    runs: &[Run],
    given: &[PercentileSlo],
) -> (Vec<PercentileSlo>, Option<String>) {
    if !given.is_empty() {
        return (given.to_vec(), Some("--slo".into()));
    }
    let mut out: Vec<PercentileSlo> = Vec::new();
    for slo in runs
        .iter()
        .flat_map(|r| &r.searches)
        .flat_map(|s| &s.record.config.percentiles)
    {
        if !out.contains(slo) {
            out.push(*slo);
        }
    }
    let source = (!out.is_empty()).then(|| "the runs' capacity searches".to_string());
    (out, source)
}

/// The summary key a percentile SLO reads: `p99_tpot_ms`.
pub fn slo_key(slo: &PercentileSlo) -> String {
    format!(
        "{}_{}_ms",
        percentile_key(slo.percentile),
        slo.metric.name()
    )
}

/// Whether `row` meets every SLO (each value the median over repetitions); the keys its
/// summaries lack are pushed onto `missing`. A failed SLO beats an unknown one.
pub(super) fn judge(row: &Row, slos: &[PercentileSlo], missing: &mut Vec<String>) -> Meets {
    let mut verdict = Meets::Yes;
    for slo in slos {
        let key = slo_key(slo);
        match row.metric(&key) {
            Some(v) if v <= slo.ms => {}
            Some(_) => verdict = Meets::No,
            None => {
                if verdict == Meets::Yes {
                    verdict = Meets::Unknown;
                }
                missing.push(key);
            }
        }
    }
    verdict
}
