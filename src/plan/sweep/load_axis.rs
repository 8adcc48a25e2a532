//! The load axes: matrix axes named after a load field, which set that field for their
//! point instead of changing the deployment. [`load_axes!`] lists each once: its name, how
//! its value is read (typed as soon as the sweep has the point), and the benchmark field it
//! overrides. Adding a load axis is one line there (and its use where the load is built).

use std::borrow::Cow;
use std::time::Duration;

use serde_json::Value;
use serde_saphyr::Spanned;

use crate::load::{Slo, parse_slos};
use crate::matrix::{Point, scalar_text};
use crate::spec::BenchmarkSpec;
use crate::spec::values::Scalar;
use crate::units;

/// A load value read, or why it does not read (the parser's words where it has any; empty
/// for a number that is not one: the caller's message says what it should be).
pub(in crate::plan) type Parsed<T> = Result<T, String>;

/// A load value as written: a matrix axis' value, or a benchmark field rendered (trimmed).
#[derive(Clone, Copy)]
pub(in crate::plan) enum Written<'a> {
    Axis(&'a Value),
    Field(&'a str),
}

impl<'a> Written<'a> {
    /// The value as text, as messages quote it.
    pub(in crate::plan) fn text(self) -> Cow<'a, str> {
        match self {
            Written::Axis(v) => Cow::Owned(scalar_text(v)),
            Written::Field(t) => Cow::Borrowed(t),
        }
    }
}

/// One load axis, typed: which axis, how its value reads, and where a point's value is.
pub(in crate::plan) struct Axis<T: 'static> {
    pub(in crate::plan) axis: LoadAxis,
    pub(in crate::plan) read: fn(Written<'_>) -> Parsed<T>,
    pub(in crate::plan) of: fn(&LoadValues) -> Option<&Parsed<T>>,
}

/// The load axes. Each line: the typed handle, the variant, the name (also the load field
/// it sets), the type its value reads to, the reader, and the key of `benchmark` holding
/// the field it overrides (a template rendered per point when no axis sets it).
macro_rules! load_axes {
    ($(
        $(#[doc = $doc:literal])*
        $handle:ident $variant:ident $name:ident: $ty:ty = $read:expr,
            from $key:literal $field:expr;
    )*) => {
        /// A matrix axis that sets the load field of its name.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub(in crate::plan) enum LoadAxis {
            $($(#[doc = $doc])* $variant,)*
        }

        impl LoadAxis {
            /// Every load axis, in the order messages list them.
            pub(in crate::plan) const ALL: &[LoadAxis] = &[$(LoadAxis::$variant),*];

            /// The axis' name, which is the name of the load field it sets.
            pub(in crate::plan) fn name(self) -> &'static str {
                match self {
                    $(LoadAxis::$variant => stringify!($name),)*
                }
            }

            /// The load axis named `name`, if it is one.
            pub(in crate::plan) fn named(name: &str) -> Option<LoadAxis> {
                Self::ALL.iter().copied().find(|a| a.name() == name)
            }

            /// The field of `benchmark` this axis overrides, with the key it is under, when
            /// the task writes it.
            pub(in crate::plan) fn field(
                self,
                bench: &BenchmarkSpec,
            ) -> Option<(&'static str, &Spanned<Scalar>)> {
                match self {
                    $(LoadAxis::$variant => {
                        let field: fn(&BenchmarkSpec) -> Option<&Spanned<Scalar>> = $field;
                        field(bench).map(|f| ($key, f))
                    })*
                }
            }
        }

        /// The load axes of one point, each read to its type.
        #[derive(Debug, Default)]
        pub(in crate::plan) struct LoadValues {
            $(pub(in crate::plan) $name: Option<Parsed<$ty>>,)*
        }

        impl LoadValues {
            /// Read the load axes of `point`.
            pub(in crate::plan) fn of(point: &Point) -> Self {
                Self {
                    $($name: point.get(stringify!($name)).map(|v| ($read)(Written::Axis(v))),)*
                }
            }
        }

        $(
            $(#[doc = $doc])*
            pub(in crate::plan) const $handle: Axis<$ty> = Axis {
                axis: LoadAxis::$variant,
                read: $read,
                of: |v| v.$name.as_ref(),
            };
        )*
    };
}

load_axes! {
    /// The most requests in flight.
    CONCURRENCY Concurrency concurrency: u32 = whole,
        from "concurrency" |b| b.concurrency.as_ref();
    /// Arrivals per second; `None` is `inf` (no limit).
    REQUEST_RATE RequestRate request_rate: Option<f64> = request_rate,
        from "request_rate" |b| b.request_rate.as_ref();
    /// The shape of the gaps between arrivals (1 is Poisson).
    BURSTINESS Burstiness burstiness: f64 = positive,
        from "burstiness" |b| b.burstiness.as_ref();
    /// Requests per point.
    NUM_PROMPTS NumPrompts num_prompts: u64 = whole,
        from "num_prompts" |b| b.num_prompts.as_ref();
    /// How long a point sends.
    DURATION Duration duration: Duration = duration,
        from "duration" |b| b.duration.as_ref();
    /// The time at the start of a point left out of its figures.
    WARMUP Warmup warmup: Duration = duration,
        from "warmup" |b| b.warmup.as_ref();
    /// The time at the end of a point left out of its figures.
    COOLDOWN Cooldown cooldown: Duration = duration,
        from "cooldown" |b| b.cooldown.as_ref();
    /// The seed of the prompts and arrivals.
    SEED Seed seed: u64 = whole,
        from "seed" |b| b.seed.as_ref();
    /// How long a silent server is waited for; `None` is `off`.
    STALL_TIMEOUT StallTimeout stall_timeout: Option<Duration> = stall_timeout,
        from "stall_timeout" |b| b.stall_timeout.as_ref();
    INPUT_LEN InputLen input_len: u32 = whole,
        from "dataset" |b| dataset(b, |d| d.input_len.as_ref());
    OUTPUT_LEN OutputLen output_len: u32 = whole,
        from "dataset" |b| dataset(b, |d| d.output_len.as_ref());
    RANGE_RATIO RangeRatio range_ratio: f64 = real,
        from "dataset" |b| dataset(b, |d| d.range_ratio.as_ref());
    PREFIX_LEN PrefixLen prefix_len: u32 = whole,
        from "dataset" |b| dataset(b, |d| d.prefix_len.as_ref());
    NUM_GROUPS NumGroups num_groups: u32 = whole,
        from "dataset" |b| dataset(b, |d| d.num_groups.as_ref());
    PROMPTS_PER_GROUP PromptsPerGroup prompts_per_group: u32 = whole,
        from "dataset" |b| dataset(b, |d| d.prompts_per_group.as_ref());
    SYSTEM_PROMPT_LEN SystemPromptLen system_prompt_len: u32 = whole,
        from "dataset" |b| dataset(b, |d| d.system_prompt_len.as_ref());
    QUESTION_LEN QuestionLen question_len: u32 = whole,
        from "dataset" |b| dataset(b, |d| d.question_len.as_ref());
    /// Goodput SLOs, vLLM's string (`"ttft:200 tpot:50"`); `benchmark.goodput` is read with
    /// the task file, so no template field.
    GOODPUT Goodput goodput: Vec<Slo> = slos,
        from "goodput" |_| None;
}

/// A field of `benchmark.dataset`, when there is one.
fn dataset(
    b: &BenchmarkSpec,
    field: fn(&crate::spec::DatasetSpecYaml) -> Option<&Spanned<Scalar>>,
) -> Option<&Spanned<Scalar>> {
    b.dataset.as_ref().and_then(|d| field(&d.value))
}

/// A benchmark field as the template it is.
pub(in crate::plan) fn template(field: &Spanned<Scalar>) -> Spanned<String> {
    Spanned {
        value: field.value.0.clone(),
        referenced: field.referenced,
        defined: field.defined,
    }
}

/// A whole number: a matrix number as it is, text parsed.
fn whole<T: TryFrom<u64> + std::str::FromStr>(w: Written<'_>) -> Parsed<T> {
    match w {
        Written::Axis(Value::Number(n)) => n
            .as_u64()
            .and_then(|n| T::try_from(n).ok())
            .ok_or_else(String::new),
        _ => w.text().parse().map_err(|_| String::new()),
    }
}

/// A number: a matrix number as it is, text parsed.
fn real(w: Written<'_>) -> Parsed<f64> {
    match w {
        Written::Axis(Value::Number(n)) => n.as_f64().ok_or_else(String::new),
        _ => w.text().parse().map_err(|_| String::new()),
    }
}

/// A finite number above zero.
fn positive(w: Written<'_>) -> Parsed<f64> {
    real(w).and_then(|v| {
        (v.is_finite() && v > 0.0)
            .then_some(v)
            .ok_or_else(String::new)
    })
}

/// A finite number above zero, or `inf` (`None`).
fn request_rate(w: Written<'_>) -> Parsed<Option<f64>> {
    let text = w.text();
    if text == "inf" || text == ".inf" {
        return Ok(None);
    }
    positive(w).map(Some)
}

/// A duration such as `30s` or `10m`.
fn duration(w: Written<'_>) -> Parsed<Duration> {
    units::parse_duration(&w.text()).map_err(|e| e.to_string())
}

/// A duration, or `off` (`None`; also `false`, which YAML 1.1 parsers read `off` as).
fn stall_timeout(w: Written<'_>) -> Parsed<Option<Duration>> {
    let text = w.text();
    if text.eq_ignore_ascii_case("off") || text == "false" {
        return Ok(None);
    }
    units::parse_duration(&text)
        .map(Some)
        .map_err(|e| e.to_string())
}

/// Goodput SLOs in vLLM's form.
fn slos(w: Written<'_>) -> Parsed<Vec<Slo>> {
    match w {
        Written::Axis(Value::String(text)) => parse_slos(text),
        Written::Field(text) => parse_slos(text),
        Written::Axis(other) => Err(format!(
            "`{}` is not SLOs; write vLLM's form, like \"ttft:200 tpot:50\"",
            scalar_text(other)
        )),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn axes_are_listed_once_in_message_order() {
        let names: Vec<&str> = LoadAxis::ALL.iter().map(|a| a.name()).collect();
        assert_eq!(
            names.join(", "),
            "concurrency, request_rate, burstiness, num_prompts, duration, warmup, cooldown, \
             seed, stall_timeout, input_len, output_len, range_ratio, prefix_len, num_groups, \
             prompts_per_group, system_prompt_len, question_len, goodput"
        );
        for a in LoadAxis::ALL {
            assert_eq!(LoadAxis::named(a.name()), Some(*a));
        }
        assert_eq!(LoadAxis::named("model"), None);
    }

    #[test]
    fn a_point_reads_its_load_axes_to_their_types() {
        let point = Point {
            values: vec![
                ("concurrency".into(), json!(8)),
                ("request_rate".into(), json!("inf")),
                ("burstiness".into(), json!(0.5)),
                ("duration".into(), json!("30s")),
                ("stall_timeout".into(), json!(false)),
                ("seed".into(), json!("7")),
                ("tp".into(), json!(2)),
            ],
        };
        let load = LoadValues::of(&point);
        assert_eq!(load.concurrency, Some(Ok(8)));
        assert_eq!(load.request_rate, Some(Ok(None)));
        assert_eq!(load.burstiness, Some(Ok(0.5)));
        assert_eq!(load.duration, Some(Ok(Duration::from_secs(30))));
        assert_eq!(load.stall_timeout, Some(Ok(None)));
        assert_eq!(load.seed, Some(Ok(7)));
        assert_eq!(load.num_prompts, None);
    }

    #[test]
    fn a_value_that_does_not_read_keeps_why() {
        let point = Point {
            values: vec![
                ("concurrency".into(), json!(1.5)),
                ("input_len".into(), json!(-1)),
                ("request_rate".into(), json!(0)),
                ("goodput".into(), json!(5)),
            ],
        };
        let load = LoadValues::of(&point);
        assert!(load.concurrency.as_ref().is_some_and(Result::is_err));
        assert!(load.input_len.as_ref().is_some_and(Result::is_err));
        assert!(load.request_rate.as_ref().is_some_and(Result::is_err));
        assert_eq!(
            load.goodput,
            Some(Err(
                "`5` is not SLOs; write vLLM's form, like \"ttft:200 tpot:50\"".into()
            ))
        );
    }

    #[test]
    fn a_rendered_field_reads_like_the_axis() {
        assert_eq!((CONCURRENCY.read)(Written::Field("16")), Ok(16));
        assert_eq!((REQUEST_RATE.read)(Written::Field(".inf")), Ok(None));
        assert_eq!((REQUEST_RATE.read)(Written::Field("2.5")), Ok(Some(2.5)));
        assert!((CONCURRENCY.read)(Written::Field("x")).is_err());
    }
}
