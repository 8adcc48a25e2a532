//! One load value of a point: the point's axis of that name (read to its type in the
//! sweep), else the benchmark field rendered with the point's variables and read the same
//! way; with errors located at the value.

use std::collections::BTreeMap;
use std::time::Duration;

use minijinja::Value as JValue;
use serde_json::Value;
use serde_saphyr::Location;

use crate::matrix::{Point, scalar_text};
use crate::plan::render::Builder;
use crate::plan::sweep::{Axis, LoadValues, Parsed, Written, template};
use crate::plan::types::PlanError;

/// Where a value came from, for errors.
#[derive(Clone, Copy)]
pub(super) struct Site {
    pub(super) source: usize,
    pub(super) loc: Location,
}

/// Resolves the load values of one point.
pub(super) struct Resolver<'a, 'b> {
    pub(super) b: &'a Builder<'b>,
    pub(super) point: &'a Point,
    /// The point's load axes, read in the sweep.
    pub(super) load: &'a LoadValues,
    pub(super) vars: &'a JValue,
    pub(super) axis_locs: &'a BTreeMap<String, Location>,
}

/// A load value of a point: read (or why not), where it is written, and as written.
pub(super) struct Got<'a, T> {
    pub(super) value: Parsed<T>,
    pub(super) site: Site,
    written: Shown<'a>,
}

/// A value as written, kept for messages.
enum Shown<'a> {
    Axis(&'a Value),
    Field(String),
}

impl<T> Got<'_, T> {
    /// The value as written, as messages quote it.
    pub(super) fn text(&self) -> String {
        match &self.written {
            Shown::Axis(v) => scalar_text(v),
            Shown::Field(t) => t.clone(),
        }
    }
}

impl<'a> Resolver<'a, '_> {
    /// Where the point's axis `name` is written.
    pub(super) fn axis_site(&self, name: &str) -> Site {
        Site {
            source: self.b.task.bench_source("matrix"),
            loc: self
                .axis_locs
                .get(name)
                .copied()
                .unwrap_or(Location::UNKNOWN),
        }
    }

    /// Load value `a`: the point's axis, else its benchmark field rendered (trimmed) and
    /// read like the axis; `None` when neither is written.
    pub(super) fn get<T: Clone>(&self, a: &Axis<T>) -> Result<Option<Got<'a, T>>, PlanError> {
        let name = a.axis.name();
        if let (Some(value), Some(v)) = ((a.of)(self.load), self.point.get(name)) {
            return Ok(Some(Got {
                value: value.clone(),
                site: self.axis_site(name),
                written: Shown::Axis(v),
            }));
        }
        let Some((key, field)) = a.axis.field(&self.b.task.spec.benchmark) else {
            return Ok(None);
        };
        let source = self.b.task.bench_source(key);
        let text = self
            .b
            .render(source, name, &template(field), self.vars)?
            .trim()
            .to_string();
        Ok(Some(Got {
            value: (a.read)(Written::Field(&text)),
            site: Site {
                source,
                loc: field.referenced,
            },
            written: Shown::Field(text),
        }))
    }

    /// An error about a value of this point (names the point when there is a sweep).
    pub(super) fn err(&self, site: Site, msg: String) -> PlanError {
        let msg = if self.point.values.is_empty() {
            msg
        } else {
            format!("{msg} (at point {})", self.point.label())
        };
        self.b.at(site.source, site.loc, msg).into()
    }

    /// Load value `a`, a number; "`key`: `text` is not `what`" when it does not read.
    pub(super) fn number<T: Clone>(&self, a: &Axis<T>, what: &str) -> Result<Option<T>, PlanError> {
        match self.get(a)? {
            None => Ok(None),
            Some(got) => got.value.clone().map(Some).map_err(|_| {
                self.err(
                    got.site,
                    format!("`{}`: `{}` is not {what}", a.axis.name(), got.text()),
                )
            }),
        }
    }

    /// Load value `a`, a duration; "`key`: why" when it does not read.
    pub(super) fn duration(&self, a: &Axis<Duration>) -> Result<Option<Duration>, PlanError> {
        match self.get(a)? {
            None => Ok(None),
            Some(got) => got
                .value
                .map(Some)
                .map_err(|e| self.err(got.site, format!("`{}`: {e}", a.axis.name()))),
        }
    }

    pub(super) fn required(
        &self,
        v: Option<u32>,
        key: &str,
        kind: &str,
        ds_loc: Site,
    ) -> Result<u32, PlanError> {
        v.ok_or_else(|| {
            self.b
                .at(
                    ds_loc.source,
                    ds_loc.loc,
                    format!("the {kind} dataset needs `{key}`"),
                )
                .with_help(format!(
                    "add `{key}:` under dataset, or a matrix axis `{key}`"
                ))
                .into()
        })
    }
}
