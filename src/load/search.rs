//! What a capacity search looks for: the axis it moves (concurrency or request rate), its
//! bounds, the SLOs a load level must meet (aggregate percentiles and per-request
//! attainment), how narrow the answer must be, and how much it may spend (levels,
//! repetitions, deployments). Parsing of the compact `p99:ttft:2s` form lives here so the
//! task file and `bench --search` read SLOs the same way.

use serde::{Deserialize, Serialize};

use super::{Limit, LoadShape, Rate, Slo, SloMetric, parse_slo_ms};

/// The load dimension the search moves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Axis {
    /// Requests in flight (closed loop): levels are whole numbers.
    Concurrency,
    /// Requests per second (open loop): latency counts from the scheduled arrival.
    RequestRate,
}

impl Axis {
    /// `concurrency` or `request_rate` (also accepts `rate` and `request-rate`).
    pub fn parse(s: &str) -> Option<Axis> {
        match s.trim() {
            "concurrency" | "max_concurrency" | "max-concurrency" => Some(Axis::Concurrency),
            "request_rate" | "request-rate" | "rate" => Some(Axis::RequestRate),
            _ => None,
        }
    }

    /// The name as written: `concurrency` or `request_rate`.
    pub fn name(self) -> &'static str {
        match self {
            Axis::Concurrency => "concurrency",
            Axis::RequestRate => "request_rate",
        }
    }

    /// A level as this axis allows it: concurrency is a whole number >= 1.
    pub fn round(self, level: f64) -> f64 {
        match self {
            Axis::Concurrency => level.round().max(1.0),
            // Four significant digits: levels stay readable in the history.
            Axis::RequestRate => {
                if level <= 0.0 || !level.is_finite() {
                    return level;
                }
                let scale = 10f64.powi(3 - level.log10().floor() as i32);
                (level * scale).round() / scale
            }
        }
    }
}

/// An aggregate SLO: the `percentile` of `metric` over the pooled requests of a level is at
/// most `ms`. A request that failed, timed out or did not finish counts as infinitely slow.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PercentileSlo {
    pub metric: SloMetric,
    /// Strictly between 0 and 100.
    pub percentile: f64,
    pub ms: f64,
}

impl PercentileSlo {
    /// `p99:ttft:2s` (also `p99.9:tpot:50` with a bare number of milliseconds).
    pub fn parse(text: &str) -> Result<PercentileSlo, String> {
        let hint = "write pP:METRIC:LIMIT, like p99:ttft:2s or p90:tpot:50ms";
        let parts: Vec<&str> = text.trim().split(':').collect();
        let [p, metric, limit] = parts[..] else {
            return Err(format!("`{text}`: {hint}"));
        };
        let percentile: f64 = p
            .trim()
            .strip_prefix('p')
            .and_then(|x| x.parse().ok())
            .ok_or_else(|| format!("`{text}`: `{p}` is not a percentile like p99; {hint}"))?;
        let metric = SloMetric::parse(metric)
            .ok_or_else(|| format!("`{text}`: METRIC `{metric}` must be ttft, tpot or e2el"))?;
        let ms = parse_slo_ms(limit).map_err(|e| format!("`{text}`: {e}"))?;
        let slo = PercentileSlo {
            metric,
            percentile,
            ms,
        };
        slo.validate().map_err(|e| format!("`{text}`: {e}"))?;
        Ok(slo)
    }

    fn validate(&self) -> Result<(), String> {
        if !(self.percentile > 0.0 && self.percentile < 100.0) {
            return Err(format!(
                "percentile {} must be strictly between 0 and 100 (p50, p90, p99, p99.9)",
                self.percentile
            ));
        }
        Ok(())
    }

    /// `p99 TTFT <= 2000 ms`.
    pub fn describe(&self) -> String {
        format!(
            "{} {} <= {} ms",
            percentile_name(self.percentile),
            self.metric.label(),
            crate::units::number(self.ms)
        )
    }
}

/// `p99`, `p99.9`: how a percentile is named (the metrics' keys name it the same way).
fn percentile_name(p: f64) -> String {
    if p.fract() == 0.0 {
        format!("p{}", p as i64)
    } else {
        format!("p{p}")
    }
}

/// An attainment SLO (DistServe's goodput): at least `fraction` of the requests meet every
/// bound. A failed, timed-out or unfinished request meets none.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Attainment {
    pub bounds: Vec<Slo>,
    /// Strictly between 0 and 1.
    pub fraction: f64,
}

impl Attainment {
    /// `>= 95% of requests meet TTFT <= 500 ms, TPOT <= 50 ms`.
    pub fn describe(&self) -> String {
        format!(
            ">= {}% of requests meet {}",
            crate::units::number(self.fraction * 100.0),
            super::describe_slos(&self.bounds)
        )
    }
}

/// A capacity search.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SearchSpec {
    pub axis: Axis,
    /// The first level probed; a failure here ends the search (no passing level).
    pub min: f64,
    /// The saturated probe, second; `None`: probe upwards by `growth` until a level fails.
    pub max: Option<f64>,
    pub percentiles: Vec<PercentileSlo>,
    pub attainment: Option<Attainment>,
    /// Stop when smallest failing / largest passing <= 1 + width (0.1: a 10%-wide interval).
    pub width: f64,
    /// Most distinct levels probed (repetitions of a level do not count).
    pub max_points: u32,
    /// Most measurements of one level; a level is measured again only while its verdict is
    /// inconclusive, which happens only near the boundary.
    pub repetitions: u32,
    /// One-sided confidence of each verdict (0.95).
    pub confidence: f64,
    /// Each end of the final interval is measured on this many deployments (1: the one the
    /// search started on), so the interval includes restart variance.
    pub repeat_deployments: u32,
    /// Factor between levels while probing upwards without `max`.
    pub growth: f64,
}

impl SearchSpec {
    /// A search with the defaults: width 0.1, 8 levels, 3 repetitions, 95% confidence,
    /// one deployment, growth 4.
    pub fn new(axis: Axis, min: f64, max: Option<f64>) -> SearchSpec {
        SearchSpec {
            axis,
            min,
            max,
            percentiles: Vec::new(),
            attainment: None,
            width: 0.1,
            max_points: 8,
            repetitions: 3,
            confidence: 0.95,
            repeat_deployments: 1,
            growth: 4.0,
        }
    }

    /// Ranges checked; the message names the setting (`field` is how the caller spells it:
    /// `search.` in a task file, `--search-` on the command line) and what to write instead.
    pub fn validate(&self, field: impl Fn(&str) -> String) -> Result<(), String> {
        let lowest = match self.axis {
            Axis::Concurrency => 1.0,
            Axis::RequestRate => f64::MIN_POSITIVE,
        };
        if !(self.min.is_finite() && self.min >= lowest) {
            return Err(format!(
                "{} {} must be a positive number (at least 1 for concurrency)",
                field("min"),
                self.min
            ));
        }
        if let Some(max) = self.max
            && !(max.is_finite() && max > self.min)
        {
            return Err(format!(
                "{} {max} must be larger than {} {}",
                field("max"),
                field("min"),
                self.min
            ));
        }
        if self.percentiles.is_empty() && self.attainment.is_none() {
            return Err(format!(
                "a search needs at least one SLO: {} like p99:ttft:2s, or {} with per-request bounds",
                field("slo"),
                field("attainment")
            ));
        }
        for p in &self.percentiles {
            p.validate().map_err(|e| format!("{}: {e}", field("slo")))?;
        }
        if let Some(a) = &self.attainment {
            if !(a.fraction > 0.0 && a.fraction < 1.0) {
                return Err(format!(
                    "{} {} must be a percentage strictly between 0 and 100",
                    field("attainment"),
                    a.fraction * 100.0
                ));
            }
            if a.bounds.is_empty() {
                return Err(format!(
                    "{} needs per-request bounds (ttft, tpot, e2el) to count good requests",
                    field("attainment")
                ));
            }
        }
        if !(self.width.is_finite() && self.width > 0.0 && self.width <= 1.0) {
            return Err(format!(
                "{} {} must be a fraction in (0, 1], like 0.1 for a 10%-wide interval",
                field("width"),
                self.width
            ));
        }
        if self.max_points < 2 {
            return Err(format!("{} must be at least 2", field("max-points")));
        }
        if self.repetitions < 1 {
            return Err(format!("{} must be at least 1", field("repetitions")));
        }
        if !(self.confidence >= 0.5 && self.confidence < 1.0) {
            return Err(format!(
                "{} {} must be a fraction in [0.5, 1), like 0.95",
                field("confidence"),
                self.confidence
            ));
        }
        if self.repeat_deployments < 1 {
            return Err(format!(
                "{} must be at least 1",
                field("repeat-deployments")
            ));
        }
        if !(self.growth.is_finite() && self.growth > 1.0) {
            return Err(format!("{} must be larger than 1", field("growth")));
        }
        Ok(())
    }
}

impl SearchSpec {
    /// The load of one measurement at `level`, from the task's (or the command line's)
    /// `template`: the level as the concurrency cap, or as the request rate (Poisson, or
    /// gamma arrivals with `burstiness` other than 1). A closed-loop level sends the
    /// template's requests but at least twice the level, so every slot turns over.
    pub fn shape_at(&self, template: &LoadShape, level: f64, burstiness: f64) -> LoadShape {
        let mut shape = template.clone();
        match self.axis {
            Axis::Concurrency => {
                shape.max_concurrency = Some(level as u32);
                if let Limit::Requests(n) = shape.limit {
                    shape.limit = Limit::Requests(n.max(2 * level as u64));
                }
            }
            Axis::RequestRate => {
                shape.rate = if burstiness == 1.0 {
                    Rate::Poisson { rps: level }
                } else {
                    Rate::Gamma {
                        rps: level,
                        burstiness,
                    }
                };
            }
        }
        shape
    }

    /// What the search will do, one line each (`orchestrate plan`).
    pub fn describe(&self) -> Vec<String> {
        let max = self.max.map_or(
            format!(
                "upwards x{} until a level fails",
                crate::units::number(self.growth)
            ),
            |m| format!("then {}", crate::units::number(m)),
        );
        let mut slos: Vec<String> = self
            .percentiles
            .iter()
            .map(PercentileSlo::describe)
            .collect();
        slos.extend(self.attainment.as_ref().map(Attainment::describe));
        let mut lines = vec![
            format!(
                "capacity search over {}: {} first, {max}",
                self.axis.name(),
                crate::units::number(self.min)
            ),
            format!("SLOs: {}", slos.join("; ")),
            format!(
                "stop at a {}%-wide interval or {} levels; a level measured up to {} times while inconclusive ({}% confidence)",
                crate::units::number(self.width * 100.0),
                self.max_points,
                self.repetitions,
                crate::units::number(self.confidence * 100.0)
            ),
        ];
        if self.repeat_deployments > 1 {
            lines.push(format!(
                "both ends of the final interval measured on {} deployments: the server is stopped and started again between them",
                self.repeat_deployments
            ));
        }
        lines
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flag(name: &str) -> String {
        format!("--search-{name}")
    }

    #[test]
    fn percentile_slos_parse_and_refuse_with_the_form_to_write() {
        let s = PercentileSlo::parse("p99:ttft:2s").unwrap();
        assert_eq!(s.metric, SloMetric::Ttft);
        assert_eq!(s.percentile, 99.0);
        assert_eq!(s.ms, 2000.0);
        assert_eq!(PercentileSlo::parse("p99.9:tpot:50").unwrap().ms, 50.0);
        assert_eq!(s.describe(), "p99 TTFT <= 2000 ms");
        for bad in [
            "p99:ttft",
            "99:ttft:2s",
            "p99:itl:2s",
            "p100:ttft:1s",
            "p99:ttft:x",
        ] {
            let e = PercentileSlo::parse(bad).unwrap_err();
            assert!(e.contains(bad), "{e}");
        }
    }

    #[test]
    fn validation_names_the_setting() {
        let mut s = SearchSpec::new(Axis::Concurrency, 1.0, Some(512.0));
        let e = s.validate(flag).unwrap_err();
        assert!(e.contains("--search-slo"), "{e}");
        s.percentiles
            .push(PercentileSlo::parse("p99:ttft:2s").unwrap());
        s.validate(flag).unwrap();
        s.max = Some(0.5);
        assert!(s.validate(flag).unwrap_err().contains("--search-max"));
        s.max = None;
        s.width = 0.0;
        assert!(s.validate(flag).unwrap_err().contains("--search-width"));
        s.width = 0.1;
        s.attainment = Some(Attainment {
            bounds: Vec::new(),
            fraction: 0.9,
        });
        assert!(s.validate(flag).unwrap_err().contains("per-request bounds"));
    }

    #[test]
    fn levels_round_to_what_the_axis_allows() {
        assert_eq!(Axis::Concurrency.round(301.6), 302.0);
        assert_eq!(Axis::Concurrency.round(0.2), 1.0);
        assert_eq!(Axis::RequestRate.round(12.345678), 12.35);
        assert_eq!(Axis::RequestRate.round(0.0123456), 0.01235);
        assert_eq!(Axis::parse("rate"), Some(Axis::RequestRate));
        assert_eq!(Axis::parse("concurrency"), Some(Axis::Concurrency));
        assert_eq!(Axis::parse("users"), None);
    }
}
