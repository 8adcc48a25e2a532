//! One value of a point for the load: the point's axis of that name, else the benchmark
//! field rendered with the point's variables; parsed, with errors located at the value.

use std::collections::BTreeMap;
use std::time::Duration;

use minijinja::Value as JValue;
use serde_saphyr::{Location, Spanned};

use crate::matrix::{Point, scalar_text};
use crate::plan::PlanError;
use crate::plan::build::Builder;
use crate::spec::values::Scalar;
use crate::units;

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
    pub(super) vars: &'a JValue,
    pub(super) axis_locs: &'a BTreeMap<String, Location>,
}

impl Resolver<'_, '_> {
    /// The text of load key `key`: the point's axis value, else the field rendered.
    pub(super) fn text(
        &self,
        key: &str,
        bench_key: &str,
        field: Option<&Spanned<Scalar>>,
    ) -> Result<Option<(String, Site)>, PlanError> {
        if let Some(v) = self.point.get(key) {
            let site = Site {
                source: self.b.task.bench_source("matrix"),
                loc: self
                    .axis_locs
                    .get(key)
                    .copied()
                    .unwrap_or(Location::UNKNOWN),
            };
            return Ok(Some((scalar_text(v), site)));
        }
        let Some(f) = field else { return Ok(None) };
        let source = self.b.task.bench_source(bench_key);
        let s = Spanned {
            value: f.value.0.clone(),
            referenced: f.referenced,
            defined: f.defined,
        };
        let text = self.b.render(source, key, &s, self.vars)?;
        Ok(Some((
            text.trim().to_string(),
            Site {
                source,
                loc: f.referenced,
            },
        )))
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

    pub(super) fn parse<T: std::str::FromStr>(
        &self,
        key: &str,
        bench_key: &str,
        field: Option<&Spanned<Scalar>>,
        what: &str,
    ) -> Result<Option<T>, PlanError> {
        match self.text(key, bench_key, field)? {
            None => Ok(None),
            Some((text, site)) => text
                .parse::<T>()
                .map(Some)
                .map_err(|_| self.err(site, format!("`{key}`: `{text}` is not {what}"))),
        }
    }

    pub(super) fn u32(
        &self,
        key: &str,
        bench_key: &str,
        f: Option<&Spanned<Scalar>>,
    ) -> Result<Option<u32>, PlanError> {
        self.parse(key, bench_key, f, "a whole number")
    }

    pub(super) fn f64(
        &self,
        key: &str,
        bench_key: &str,
        f: Option<&Spanned<Scalar>>,
    ) -> Result<Option<f64>, PlanError> {
        let v: Option<f64> = self.parse(key, bench_key, f, "a number")?;
        Ok(v)
    }

    pub(super) fn duration(
        &self,
        key: &str,
        f: Option<&Spanned<Scalar>>,
    ) -> Result<Option<Duration>, PlanError> {
        match self.text(key, key, f)? {
            None => Ok(None),
            Some((text, site)) => units::parse_duration(&text)
                .map(Some)
                .map_err(|e| self.err(site, format!("`{key}`: {e}"))),
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
