//! The `dataset` section of a point: the keys its kind takes (others are refused), each
//! resolved like any load value, into the client's [`DatasetSpec`].

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_saphyr::Spanned;

use super::resolver::{Resolver, Site};
use crate::dataset::{Conversation, DEFAULT_BLOCK_SIZE, DatasetSpec, Dist, Replay};
use crate::plan::sweep::{
    Axis, INPUT_LEN, NUM_GROUPS, OUTPUT_LEN, PREFIX_LEN, PROMPTS_PER_GROUP, QUESTION_LEN,
    RANGE_RATIO, SYSTEM_PROMPT_LEN,
};
use crate::plan::types::PlanError;
use crate::spec::{DatasetKind, DatasetSpecYaml, Diagnostic, TurnsYaml};

impl Resolver<'_, '_> {
    /// The point's dataset: the `dataset` section with the point's axes applied.
    #[expect(
        clippy::too_many_lines,
        reason = "one match arm per dataset kind; to split per kind"
    )]
    pub(super) fn dataset(&self, d: &Spanned<DatasetSpecYaml>) -> Result<DatasetSpec, PlanError> {
        let ds_loc = d.referenced;
        let DatasetSpecYaml { kind, path, .. } = &d.value;
        let src = self.b.task.bench_source("dataset");
        let site = Site {
            source: src,
            loc: ds_loc,
        };
        let (kind_name, allowed) = kind_keys(kind);
        self.reject_other_keys(&d.value, kind_name, allowed)?;
        // Weka's traces may be a directory of files, one per session.
        let dir_ok = *kind == DatasetKind::Weka;
        let file = |required: bool| -> Result<Option<PathBuf>, PlanError> {
            match path {
                Some(p) => {
                    let text = self.b.render(src, "dataset.path", p, self.vars)?;
                    let base = self.b.task.sources[src]
                        .path
                        .parent()
                        .unwrap_or(Path::new("."));
                    let file = base.join(&text);
                    if !(file.is_file() || dir_ok && file.is_dir()) {
                        let site = Site {
                            source: src,
                            loc: p.referenced,
                        };
                        let what = if dir_ok { "file or directory" } else { "file" };
                        return Err(self.err(
                            site,
                            format!(
                                "`dataset.path`: no {what} {} (a relative path is read from the task file's directory); fix the path or create the file",
                                file.display()
                            ),
                        ));
                    }
                    Ok(Some(file))
                }
                None if required => Err(Diagnostic::file(
                    &self.b.task.sources[src].path,
                    format!("the {kind_name} dataset needs `path`"),
                )
                .into()),
                None => Ok(None),
            }
        };
        let u = |a: &Axis<u32>| self.number(a, "a whole number");
        // A length this dataset kind cannot do without.
        let need = |a: &Axis<u32>| {
            let key = a.axis.name();
            let v = self.required(u(a)?, key, kind_name, site)?;
            if v == 0
                && let Some(got) = self.get(a)?
            {
                return Err(self.err(got.site, format!("`{key}` must be at least 1 token")));
            }
            Ok(v)
        };
        Ok(match kind {
            DatasetKind::Random => {
                let ratio = self.number(&RANGE_RATIO, "a number")?.unwrap_or(0.0);
                if !(0.0..1.0).contains(&ratio) {
                    return Err(self.err(site, format!("`range_ratio` {ratio} must be in [0, 1)")));
                }
                DatasetSpec::Random {
                    input_len: need(&INPUT_LEN)?,
                    output_len: need(&OUTPUT_LEN)?,
                    range_ratio: ratio,
                    prefix_len: u(&PREFIX_LEN)?.unwrap_or(0),
                }
            }
            DatasetKind::Sharegpt => DatasetSpec::ShareGpt {
                path: file(true)?.unwrap_or_default(),
                input_len: u(&INPUT_LEN)?,
                output_len: u(&OUTPUT_LEN)?,
            },
            DatasetKind::Text => DatasetSpec::Text {
                path: file(true)?.unwrap_or_default(),
                input_len: need(&INPUT_LEN)?,
                output_len: need(&OUTPUT_LEN)?,
            },
            DatasetKind::SharedPrefix => DatasetSpec::SharedPrefix {
                num_groups: need(&NUM_GROUPS)?,
                prompts_per_group: need(&PROMPTS_PER_GROUP)?,
                system_prompt_len: need(&SYSTEM_PROMPT_LEN)?,
                question_len: need(&QUESTION_LEN)?,
                output_len: need(&OUTPUT_LEN)?,
            },
            DatasetKind::Jsonl => DatasetSpec::Jsonl {
                path: file(true)?.unwrap_or_default(),
                output_len: u(&OUTPUT_LEN)?,
            },
            DatasetKind::Weka => DatasetSpec::Weka {
                path: file(true)?.unwrap_or_default(),
                speedup: self.replay(&d.value)?.speedup,
            },
            DatasetKind::Mooncake => DatasetSpec::Mooncake {
                path: file(true)?.unwrap_or_default(),
                replay: self.replay(&d.value)?,
            },
            DatasetKind::Conversation => {
                let path = file(false)?;
                let ratio = self.number(&RANGE_RATIO, "a number")?.unwrap_or(0.0);
                if !(0.0..1.0).contains(&ratio) {
                    return Err(self.err(site, format!("`range_ratio` {ratio} must be in [0, 1)")));
                }
                // Synthesized sessions need their lengths; ShareGPT's come from the data.
                // A length distribution stands in for its length.
                let len = |axis: &Axis<u32>, dist: bool| -> Result<u32, PlanError> {
                    if dist {
                        Ok(u(axis)?.unwrap_or(0))
                    } else {
                        need(axis)
                    }
                };
                let (input_len, output_len) = match path {
                    None => (
                        len(&INPUT_LEN, d.value.input_dist.is_some())?,
                        Some(len(&OUTPUT_LEN, d.value.output_dist.is_some())?),
                    ),
                    Some(_) => (u(&INPUT_LEN)?.unwrap_or(0), u(&OUTPUT_LEN)?),
                };
                let (num_turns, think_time) = self.turns(&d.value)?;
                let input_dist = self.dist("input_dist", &d.value.input_dist)?;
                let output_dist = self.dist("output_dist", &d.value.output_dist)?;
                DatasetSpec::Conversation(Conversation {
                    path,
                    num_turns,
                    input_len,
                    output_len,
                    range_ratio: ratio,
                    input_dist,
                    output_dist,
                    prefix_len: u(&PREFIX_LEN)?.unwrap_or(0),
                    system_prompt_len: u(&SYSTEM_PROMPT_LEN)?.unwrap_or(0),
                    think_time,
                })
            }
        })
    }

    /// A conversation's length distribution (`input_dist`, `output_dist`), checked where it
    /// is written.
    fn dist(&self, key: &str, d: &Option<Spanned<Dist>>) -> Result<Option<Dist>, PlanError> {
        let Some(d) = d else { return Ok(None) };
        if let Some(why) = d.value.problem() {
            let src = self.b.task.bench_source("dataset");
            return Err(self
                .b
                .at(src, d.referenced, format!("`{key}`: {why}"))
                .into());
        }
        Ok(Some(d.value.clone()))
    }

    /// A conversation's turns and think time, each checked where it is written.
    fn turns(&self, d: &DatasetSpecYaml) -> Result<(Option<Dist>, Duration), PlanError> {
        let src = self.b.task.bench_source("dataset");
        let at = |loc, msg: String| -> PlanError { self.b.at(src, loc, msg).into() };
        let num_turns = match &d.num_turns {
            None => None,
            Some(t) => {
                let dist = match &t.value {
                    TurnsYaml::Count(0) => {
                        return Err(at(
                            t.referenced,
                            "`num_turns` must be at least 1 (messages, user and assistant together, as vLLM counts them: 2 is one request)".into(),
                        ));
                    }
                    TurnsYaml::Count(n) => Dist::Constant { value: *n },
                    TurnsYaml::Distribution(d) => d.clone(),
                };
                if let Some(why) = dist.problem() {
                    return Err(at(t.referenced, format!("`num_turns`: {why}")));
                }
                Some(dist)
            }
        };
        let think_time = match &d.think_time {
            None => Duration::ZERO,
            Some(t) => crate::units::parse_duration(&t.value).map_err(|e| {
                at(
                    t.referenced,
                    format!(
                        "`think_time`: `{}` is not a duration like 500ms or 2s: {e}",
                        t.value
                    ),
                )
            })?,
        };
        Ok((num_turns, think_time))
    }

    /// A Mooncake trace's block size, speedup and window, each checked where it is written.
    fn replay(&self, d: &DatasetSpecYaml) -> Result<Replay, PlanError> {
        let src = self.b.task.bench_source("dataset");
        let at = |loc, msg: String| -> PlanError { self.b.at(src, loc, msg).into() };
        let block_size = match &d.block_size {
            Some(b) if b.value == 0 => {
                return Err(at(
                    b.referenced,
                    "`block_size` must be at least 1 token".into(),
                ));
            }
            Some(b) => b.value,
            None => DEFAULT_BLOCK_SIZE,
        };
        let speedup = match &d.speedup {
            Some(s) if !(s.value.is_finite() && s.value > 0.0) => {
                return Err(at(
                    s.referenced,
                    format!(
                        "`speedup` {} must be above 0 (2 replays twice as fast)",
                        s.value
                    ),
                ));
            }
            Some(s) => s.value,
            None => 1.0,
        };
        let time =
            |key: &str, v: &Option<Spanned<String>>| -> Result<Option<Duration>, PlanError> {
                v.as_ref()
                    .map(|t| {
                        crate::units::parse_duration(&t.value).map_err(|e| {
                            at(
                                t.referenced,
                                format!(
                                    "`{key}`: `{}` is not a duration like 90s or 10m: {e}",
                                    t.value
                                ),
                            )
                        })
                    })
                    .transpose()
            };
        Ok(Replay {
            block_size,
            speedup,
            start: time("start", &d.start)?.unwrap_or(Duration::ZERO),
            duration: time("duration", &d.duration)?,
        })
    }

    /// Refuse keys the dataset kind does not take, instead of ignoring them.
    fn reject_other_keys(
        &self,
        d: &DatasetSpecYaml,
        kind_name: &str,
        allowed: &[&str],
    ) -> Result<(), PlanError> {
        let DatasetSpecYaml {
            kind: _,
            path,
            input_len,
            output_len,
            range_ratio,
            prefix_len,
            num_groups,
            prompts_per_group,
            system_prompt_len,
            question_len,
            block_size,
            speedup,
            start,
            duration,
            num_turns,
            think_time,
            input_dist,
            output_dist,
        } = d;
        let src = self.b.task.bench_source("dataset");
        let scalar_fields = [
            ("input_len", input_len),
            ("output_len", output_len),
            ("range_ratio", range_ratio),
            ("prefix_len", prefix_len),
            ("num_groups", num_groups),
            ("prompts_per_group", prompts_per_group),
            ("system_prompt_len", system_prompt_len),
            ("question_len", question_len),
        ];
        for (key, f) in scalar_fields {
            if let Some(f) = f
                && !allowed.contains(&key)
            {
                return Err(self
                    .b
                    .at(
                        src,
                        f.referenced,
                        format!("`{key}` does not apply to the {kind_name} dataset"),
                    )
                    .with_help(format!("{kind_name} takes: {}", allowed.join(", ")))
                    .into());
            }
        }
        let other_fields = [
            ("block_size", block_size.as_ref().map(|v| v.referenced)),
            ("speedup", speedup.as_ref().map(|v| v.referenced)),
            ("start", start.as_ref().map(|v| v.referenced)),
            ("duration", duration.as_ref().map(|v| v.referenced)),
            ("num_turns", num_turns.as_ref().map(|v| v.referenced)),
            ("think_time", think_time.as_ref().map(|v| v.referenced)),
            ("input_dist", input_dist.as_ref().map(|v| v.referenced)),
            ("output_dist", output_dist.as_ref().map(|v| v.referenced)),
        ];
        for (key, loc) in other_fields {
            if let Some(loc) = loc
                && !allowed.contains(&key)
            {
                return Err(self
                    .b
                    .at(
                        src,
                        loc,
                        format!("`{key}` does not apply to the {kind_name} dataset"),
                    )
                    .with_help(format!("{kind_name} takes: {}", allowed.join(", ")))
                    .into());
            }
        }
        if let Some(p) = path
            && !allowed.contains(&"path")
        {
            return Err(self
                .b
                .at(
                    src,
                    p.referenced,
                    format!("`path` does not apply to the {kind_name} dataset"),
                )
                .into());
        }
        Ok(())
    }
}

/// A dataset kind's name in messages, and the keys it takes.
fn kind_keys(kind: &DatasetKind) -> (&'static str, &'static [&'static str]) {
    let kind_name = match kind {
        DatasetKind::Random => "random",
        DatasetKind::Sharegpt => "sharegpt",
        DatasetKind::Text => "text",
        DatasetKind::SharedPrefix => "shared_prefix",
        DatasetKind::Jsonl => "jsonl",
        DatasetKind::Mooncake => "mooncake",
        DatasetKind::Conversation => "conversation",
        DatasetKind::Weka => "weka",
    };
    let allowed: &[&str] = match kind {
        DatasetKind::Random => &["input_len", "output_len", "range_ratio", "prefix_len"],
        DatasetKind::Sharegpt => &["path", "input_len", "output_len"],
        DatasetKind::Text => &["path", "input_len", "output_len"],
        DatasetKind::SharedPrefix => &[
            "num_groups",
            "prompts_per_group",
            "system_prompt_len",
            "question_len",
            "output_len",
        ],
        DatasetKind::Jsonl => &["path", "output_len"],
        DatasetKind::Mooncake => &["path", "block_size", "speedup", "start", "duration"],
        DatasetKind::Weka => &["path", "speedup"],
        DatasetKind::Conversation => &[
            "path",
            "num_turns",
            "input_len",
            "output_len",
            "range_ratio",
            "input_dist",
            "output_dist",
            "prefix_len",
            "system_prompt_len",
            "think_time",
        ],
    };
    (kind_name, allowed)
}
