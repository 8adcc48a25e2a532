//! The value forms only dstack files write: service probes, the start order and stop
//! criteria of a multi-node run, `model: {name, format}` and volume maps. What each dstack
//! key means here is `spec::dstack`'s.

use std::fmt;

use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_saphyr::Spanned;

use crate::spec::values::NonZeroDurationValue;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum StartupOrder {
    /// Every process at once.
    #[default]
    Any,
    /// Node 0 of each replica first; the other ranks once it is up.
    MasterFirst,
    /// The ranks above 0 first; node 0 once they are up.
    WorkersFirst,
}

/// `stop_criteria:` of dstack.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum StopCriteria {
    AllDone,
    MasterDone,
}

/// One entry of a service's `probes:`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ProbeSpec {
    /// Must be `http`.
    #[serde(rename = "type")]
    pub kind: Spanned<String>,
    /// Path requested (default `/`).
    #[serde(default)]
    pub url: Option<Spanned<String>>,
    /// `get` (default) or `post`, ...
    #[serde(default)]
    pub method: Option<Spanned<String>>,
    /// Headers sent with the probe (not sent by readiness).
    #[serde(default)]
    pub headers: Vec<serde_json::Value>,
    /// Body of a POST probe.
    #[serde(default)]
    pub body: Option<String>,
    /// Timeout of one probe request.
    #[serde(default)]
    pub timeout: Option<serde_json::Value>,
    /// Time between probes.
    #[serde(default)]
    pub interval: Option<Spanned<NonZeroDurationValue>>,
    /// Successes in a row before ready.
    #[serde(default)]
    pub ready_after: Option<u32>,
    /// Stop probing once ready.
    #[serde(default)]
    pub until_ready: Option<bool>,
}

/// `model:` as a string, or dstack's `{type: chat, name, format, prefix, ...}`: the name.
pub(super) fn model_name<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<Spanned<String>>, D::Error> {
    struct ModelName(String);
    impl<'de> Deserialize<'de> for ModelName {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            model_visit(d).map(ModelName)
        }
    }
    let m: Option<Spanned<ModelName>> = Option::deserialize(d)?;
    Ok(m.map(|m| Spanned {
        value: m.value.0,
        referenced: m.referenced,
        defined: m.defined,
    }))
}

fn model_visit<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    struct V;
    impl<'de> Visitor<'de> for V {
        type Value = String;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a model id, or {name: ..., format: openai}")
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<String, E> {
            Ok(v.to_string())
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<String, A::Error> {
            const KEYS: &[&str] = &[
                "type",
                "name",
                "format",
                "prefix",
                "chat_template",
                "eos_token",
            ];
            let mut name = None;
            while let Some(k) = map.next_key::<String>()? {
                match k.as_str() {
                    "name" => name = Some(map.next_value::<String>()?),
                    "format" => {
                        let f: String = map.next_value()?;
                        if f != "openai" && f != "tgi" {
                            return Err(de::Error::custom(format!(
                                "`{f}` is not a model format; write openai or tgi"
                            )));
                        }
                    }
                    k if KEYS.contains(&k) => {
                        map.next_value::<de::IgnoredAny>()?;
                    }
                    other => return Err(de::Error::unknown_field(other, KEYS)),
                }
            }
            name.ok_or_else(|| de::Error::missing_field("name"))
        }
    }
    d.deserialize_any(V)
}

/// `volumes:` entries: `host:container[:ro]` strings, or dstack's maps
/// `{instance_path, path, optional}`; a network volume (`{name, path}`) is refused.
pub(super) fn volumes<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Spanned<String>>, D::Error> {
    struct Entry(String);
    impl<'de> Deserialize<'de> for Entry {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            volume_visit(d).map(Entry)
        }
    }
    let list: Option<Vec<Spanned<Entry>>> = Option::deserialize(d)?;
    Ok(list
        .unwrap_or_default()
        .into_iter()
        .map(|e| Spanned {
            value: e.value.0,
            referenced: e.referenced,
            defined: e.defined,
        })
        .collect())
}

fn volume_visit<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    struct V;
    impl<'de> Visitor<'de> for V {
        type Value = String;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("`/host/path:/container/path` or {instance_path, path}")
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<String, E> {
            Ok(v.to_string())
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<String, A::Error> {
            let (mut host, mut path) = (None, None);
            while let Some(k) = map.next_key::<String>()? {
                match k.as_str() {
                    "instance_path" => host = Some(map.next_value::<String>()?),
                    "path" => path = Some(map.next_value::<String>()?),
                    "optional" => {
                        map.next_value::<bool>()?;
                    }
                    "name" => {
                        return Err(de::Error::custom(
                            "network volumes are dstack cloud volumes; mount a host directory instead: {instance_path: /data, path: /data}",
                        ));
                    }
                    other => {
                        return Err(de::Error::unknown_field(
                            other,
                            &["instance_path", "path", "optional"],
                        ));
                    }
                }
            }
            let host = host.ok_or_else(|| de::Error::missing_field("instance_path"))?;
            let path = path.ok_or_else(|| de::Error::missing_field("path"))?;
            Ok(format!("{host}:{path}"))
        }
        fn visit_seq<A: SeqAccess<'de>>(self, _seq: A) -> Result<String, A::Error> {
            Err(de::Error::custom(
                "write one mount per entry: `/host/path:/container/path`",
            ))
        }
    }
    d.deserialize_any(V)
}

/// `replicas:` of a plain task or service: a fixed count (`2`), or dstack's autoscaling
/// range (`"1..4"`, `"..3"` = `0..3`, `{min, max}`). A range needs `scaling:` and its
/// maximum (dstack's rules); the benchmark runs a fixed count ([`Replicas::count`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Replicas {
    /// The range's lower bound: the count a benchmark runs.
    pub min: u32,
    /// The range's upper bound (autoscaling's limit; not used during a measurement).
    pub max: u32,
}

impl Replicas {
    /// A fixed count `n`.
    pub fn fixed(n: u32) -> Self {
        Self { min: n, max: n }
    }

    /// A range (`min` below `max`), not a fixed count.
    pub fn is_range(&self) -> bool {
        self.min != self.max
    }

    /// The count a benchmark runs: the fixed count, or a range's lower bound (at least 1:
    /// dstack starts `0..N` with no replica and scales up on the first request, but a
    /// measurement needs one to send it to).
    pub fn count(&self) -> u32 {
        if self.is_range() {
            self.min.max(1)
        } else {
            self.min
        }
    }
}

impl fmt::Display for Replicas {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_range() {
            write!(f, "{}..{}", self.min, self.max)
        } else {
            write!(f, "{}", self.min)
        }
    }
}

/// `a..b`, `..b`, `a` (spaces allowed); `a..` and `..` lack the maximum.
fn replicas_from_text(text: &str) -> Result<Replicas, String> {
    let help = "write a count (`2`) or a range with its maximum (`1..4`, `..3`)";
    let word = |w: &str| -> Result<Option<u32>, String> {
        let w = w.trim();
        if w.is_empty() {
            return Ok(None);
        }
        w.parse::<u32>()
            .map(Some)
            .map_err(|_| format!("`{text}` is not a replica count or range: {help}"))
    };
    let (min, max) = match text.split_once("..") {
        Some((a, b)) => (word(a)?, word(b)?),
        None => {
            let n = word(text)?;
            (n, n)
        }
    };
    let Some(max) = max else {
        return Err(format!(
            "`replicas: {text}` has no maximum; dstack requires one: write `{}..N`",
            min.unwrap_or(0)
        ));
    };
    let min = min.unwrap_or(0);
    if min > max {
        return Err(format!(
            "`replicas: {text}`: the minimum is above the maximum; write `{max}..{min}`"
        ));
    }
    Ok(Replicas { min, max })
}

/// Reads a replica count or range; [`super::dstack_groups::ReplicasSpec`] reuses it for
/// the forms that are not a list of replica groups.
pub(super) struct ReplicasVisitor;

impl<'de> Visitor<'de> for ReplicasVisitor {
    type Value = Replicas;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a replica count (`2`) or range (`1..4`, `..3`, {min, max})")
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Replicas, E> {
        u32::try_from(v)
            .map(Replicas::fixed)
            .map_err(|_| E::custom(format!("{v} replicas is too many")))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Replicas, E> {
        u64::try_from(v)
            .map_err(|_| E::custom(format!("`replicas: {v}` is negative")))
            .and_then(|v| self.visit_u64(v))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Replicas, E> {
        replicas_from_text(v).map_err(E::custom)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Replicas, A::Error> {
        let (mut min, mut max) = (None, None);
        while let Some(k) = map.next_key::<String>()? {
            match k.as_str() {
                "min" => min = Some(map.next_value::<u32>()?),
                "max" => max = Some(map.next_value::<u32>()?),
                other => return Err(de::Error::unknown_field(other, &["min", "max"])),
            }
        }
        let text = format!(
            "{}..{}",
            min.map(|m| m.to_string()).unwrap_or_default(),
            max.map(|m| m.to_string()).unwrap_or_default()
        );
        replicas_from_text(&text).map_err(de::Error::custom)
    }
}

impl<'de> Deserialize<'de> for Replicas {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ReplicasVisitor)
    }
}

/// dstack's `scaling:` of a service with a `replicas` range. Checked as dstack checks it
/// (metric `rps`, target above 0, window 30s, 60s or 300s); a benchmark does not autoscale.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ScalingSpec {
    /// Only `rps`.
    pub metric: Spanned<String>,
    /// Requests per second per replica.
    pub target: Spanned<f64>,
    /// The averaging window: `30s`, `60s` or `300s`.
    #[serde(default)]
    pub window: Option<Spanned<serde_json::Value>>,
    /// Delay before scaling up.
    #[serde(default)]
    pub scale_up_delay: Option<serde_json::Value>,
    /// Delay before scaling down.
    #[serde(default)]
    pub scale_down_delay: Option<serde_json::Value>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replica_ranges_read_as_dstack_reads_them() {
        let r = |t: &str| replicas_from_text(t);
        assert_eq!(r("1..4"), Ok(Replicas { min: 1, max: 4 }));
        assert_eq!(r(" 2 .. 3 "), Ok(Replicas { min: 2, max: 3 }));
        assert_eq!(r("..3"), Ok(Replicas { min: 0, max: 3 }));
        assert_eq!(r("2"), Ok(Replicas::fixed(2)));
        assert!(r("1..").unwrap_err().contains("no maximum"));
        assert!(r("..").unwrap_err().contains("no maximum"));
        assert!(r("4..1").unwrap_err().contains("minimum is above"));
        assert!(r("a..b").unwrap_err().contains("not a replica count"));
        assert_eq!(Replicas { min: 0, max: 3 }.count(), 1);
        assert_eq!(Replicas { min: 2, max: 3 }.count(), 2);
        assert_eq!(Replicas::fixed(0).count(), 0);
        assert_eq!(Replicas { min: 1, max: 4 }.to_string(), "1..4");
    }
}
