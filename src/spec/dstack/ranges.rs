//! dstack's autoscaling: `replicas: A..B` with `scaling:`. Both are checked as dstack checks
//! them, and a benchmark runs a fixed count (the lower bound, or `--replicas`); `plan` says
//! which count and that autoscaling is off during the measurement.

use serde_saphyr::{Location, Spanned};

use super::keys::Note;
use crate::spec::diagnostic::Diagnostic;
use crate::spec::types::TaskSpec;
use crate::spec::types::dstack_groups::ReplicasSpec;
use crate::spec::types::dstack_values::{Replicas, ScalingSpec};

/// The windows dstack accepts, in seconds (`SERVICE_SCALING_WINDOWS`).
const WINDOWS: [u64; 3] = [30, 60, 300];

/// Check `replicas` and `scaling` together and note the count the benchmark runs.
pub(super) fn ranges(
    spec: &TaskSpec,
    at: &impl Fn(Location, String) -> Diagnostic,
    notes: &mut Vec<Note>,
) -> Result<(), Diagnostic> {
    let counted = spec.replicas.as_ref().and_then(|r| {
        r.value.count().map(|c| Spanned {
            value: c,
            referenced: r.referenced,
            defined: r.defined,
        })
    });
    let range = counted.as_ref().filter(|r| r.value.is_range());
    match (range, &spec.scaling) {
        (Some(r), None) => {
            return Err(at(
                r.referenced,
                format!(
                    "`replicas: {}` is a range, which dstack autoscales: it needs `scaling`",
                    r.value
                ),
            )
            .with_help(format!(
                "add `scaling: {{metric: rps, target: 10}}` (the benchmark still runs a fixed {} replica{}), or write a fixed count",
                r.value.count(),
                plural(r.value.count())
            )));
        }
        (None, Some(s)) => {
            return Err(at(
                s.referenced,
                "`scaling` needs `replicas` to be a range".to_string(),
            )
            .with_help("write `replicas: 1..4`, or remove `scaling`"));
        }
        _ => {}
    }
    if let Some(s) = &spec.scaling {
        check_scaling(&s.value, at)?;
    }
    if let (Some(r), Some(s)) = (range, &spec.scaling) {
        notes.push(count_note(r, r.value.count(), false));
        notes.push(Note {
            key: "scaling".into(),
            line: s.referenced.line(),
            honored: false,
            text: format!(
                "autoscaling is off during the measurement: a benchmark needs a fixed count (metric {}, target {} not used)",
                s.value.metric.value, s.value.target.value
            ),
        });
    }
    Ok(())
}

/// The note for `replicas:` as written (`written`) when the benchmark runs `count`: the
/// range's lower bound, or `--replicas` (`flag`).
fn count_note(written: &Spanned<Replicas>, count: u32, flag: bool) -> Note {
    let mut text = format!("`{}`: the benchmark runs ", written.value);
    if flag {
        text.push_str(&format!(
            "{count} replica{} (`--replicas {count}`)",
            plural(count)
        ));
    } else {
        text.push_str(&format!(
            "a fixed {count} replica{} (the lower bound)",
            plural(count)
        ));
        if written.value.min == 0 {
            text.push_str(" (dstack starts `0..N` with none and scales up on the first request; a measurement needs one)");
        }
    }
    if written.value.is_range() {
        text.push_str("; autoscaling is off during the measurement");
    }
    if !flag {
        text.push_str("; `--replicas N` picks another count");
    }
    Note {
        key: "replicas".into(),
        line: written.referenced.line(),
        honored: true,
        text,
    }
}

pub(super) fn plural(n: u32) -> &'static str {
    if n == 1 { "" } else { "s" }
}

pub(super) fn check_scaling(
    s: &ScalingSpec,
    at: &impl Fn(Location, String) -> Diagnostic,
) -> Result<(), Diagnostic> {
    if s.metric.value != "rps" {
        return Err(at(
            s.metric.referenced,
            format!("scaling metric `{}` is not dstack's", s.metric.value),
        )
        .with_help("dstack scales on `metric: rps` only"));
    }
    if s.target.value.is_nan() || s.target.value <= 0.0 {
        return Err(at(
            s.target.referenced,
            format!("scaling target {} is not above 0", s.target.value),
        )
        .with_help("write the requests per second per replica, e.g. `target: 10`"));
    }
    if let Some(w) = &s.window
        && !window_seconds(&w.value).is_some_and(|n| WINDOWS.contains(&n))
    {
        let text = match &w.value {
            serde_json::Value::String(t) => t.clone(),
            other => other.to_string(),
        };
        return Err(at(
            w.referenced,
            format!("scaling window `{text}` is not one of dstack's"),
        )
        .with_help("write `30s`, `60s` or `300s`"));
    }
    Ok(())
}

/// Seconds of a dstack duration: a number of seconds, or `N` with `s`, `m` or `h`.
fn window_seconds(v: &serde_json::Value) -> Option<u64> {
    match v {
        serde_json::Value::Number(n) => n.as_u64(),
        serde_json::Value::String(t) => {
            let t = t.trim();
            let (num, unit) = t.split_at(t.find(|c: char| !c.is_ascii_digit())?);
            let n: u64 = num.parse().ok()?;
            match unit {
                "s" => Some(n),
                "m" => n.checked_mul(60),
                "h" => n.checked_mul(3600),
                _ => None,
            }
        }
        _ => None,
    }
}

/// `--replicas N`: the benchmark runs `n` replicas of a plain task or service, whatever its
/// `replicas:` says; the note says so. Refused for a task with `roles:` (each role has its
/// own count).
pub fn override_replicas(spec: &mut TaskSpec, notes: &mut Vec<Note>, n: u32) -> Result<(), String> {
    if spec.roles.is_some() {
        return Err(format!(
            "`--replicas {n}` sets the replica count of a single server, but the task has `roles:`; set `replicas` in each role"
        ));
    }
    if n == 0 {
        return Err("`--replicas 0`: a benchmark needs at least one replica".into());
    }
    let written = spec.replicas.as_ref().and_then(|r| {
        r.value.count().map(|c| Spanned {
            value: c,
            referenced: r.referenced,
            defined: r.defined,
        })
    });
    notes.retain(|note| note.key != "replicas");
    let note = match &written {
        Some(w) => count_note(w, n, true),
        None => Note {
            key: "replicas".into(),
            line: 0,
            honored: true,
            text: format!(
                "not written; `--replicas {n}`: the benchmark runs {n} replica{}",
                plural(n)
            ),
        },
    };
    notes.push(note);
    notes.sort_by_key(|n| n.line);
    let loc = written.map_or(Location::UNKNOWN, |w| w.referenced);
    spec.replicas = Some(Spanned {
        value: ReplicasSpec::Count(Replicas::fixed(n)),
        referenced: loc,
        defined: loc,
    });
    Ok(())
}
