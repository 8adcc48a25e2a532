//! Leaf values of the task file that need more than serde's defaults: scalars that may be
//! templates, durations, sizes, ports (with dstack's mappings) and dstack's two `env` forms
//! (GPU, CPU and disk requests are in `resources`). Each has a
//! hand-written visitor so errors keep their YAML location (no `untagged` enums).
//!
//! Owns: parsing single values. Does not own: the file layout (types) or resolution (plan).

use std::fmt;
use std::time::Duration;

use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Serialize, Serializer};
use serde_saphyr::Spanned;

use crate::load::{Slo, no_repeats, parse_slos, slo};
use crate::units;

pub use super::scalar::Scalar;

/// A duration written as "45m", "90s", "1h30m", "250ms" or a number of seconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DurationValue(pub Duration);

impl<'de> Deserialize<'de> for DurationValue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = Scalar::deserialize(d)?;
        units::parse_duration(&s.0)
            .map(DurationValue)
            .map_err(de::Error::custom)
    }
}

impl Serialize for DurationValue {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&units::format_duration(self.0))
    }
}

/// A duration that must be longer than zero (a probe interval, a request timeout).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NonZeroDurationValue(pub Duration);

impl<'de> Deserialize<'de> for NonZeroDurationValue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = Scalar::deserialize(d)?;
        match units::parse_duration(&s.0) {
            Ok(d) if d.is_zero() => Err(de::Error::custom(format!(
                "`{}` is zero; write a duration longer than zero, like 1s or 250ms",
                s.0
            ))),
            Ok(d) => Ok(NonZeroDurationValue(d)),
            Err(e) => Err(de::Error::custom(e)),
        }
    }
}

impl Serialize for NonZeroDurationValue {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&units::format_duration(self.0))
    }
}

/// A finite number above zero (a request rate).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(transparent)]
pub struct PositiveValue(pub f64);

impl<'de> Deserialize<'de> for PositiveValue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = f64::deserialize(d)?;
        if v.is_finite() && v > 0.0 {
            Ok(PositiveValue(v))
        } else {
            Err(de::Error::custom(format!(
                "`{v}` is not above zero; write a rate in requests per second, like 0.5 or 10"
            )))
        }
    }
}

/// A fraction from 0 to 1 (an error rate).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(transparent)]
pub struct FractionValue(pub f64);

impl<'de> Deserialize<'de> for FractionValue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = f64::deserialize(d)?;
        if (0.0..=1.0).contains(&v) {
            Ok(FractionValue(v))
        } else {
            Err(de::Error::custom(format!(
                "`{v}` is not a fraction; write a number from 0 to 1, like 0.01 for 1%"
            )))
        }
    }
}

/// A size in bytes written as "32GB", "16Gi", "512MiB" or a number of bytes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SizeValue(pub u64);

impl<'de> Deserialize<'de> for SizeValue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = Scalar::deserialize(d)?;
        units::parse_size(&s.0)
            .map(SizeValue)
            .map_err(de::Error::custom)
    }
}

impl Serialize for SizeValue {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(self.0)
    }
}

/// `port: 8000` or `port: auto` (a free port is picked when the plan is built).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PortValue {
    Fixed(u16),
    Auto,
}

impl PortValue {
    /// Parse `8000`, `auto`, or dstack's mappings `80:8000` and `*:8000` (the server listens
    /// on the container port, the part after the colon).
    pub fn parse(text: &str) -> Result<Self, String> {
        if text == "auto" {
            return Ok(PortValue::Auto);
        }
        let container = text.rsplit_once(':').map_or(text, |(_, c)| c);
        match container.trim().parse::<u16>() {
            Ok(p) if p > 0 => Ok(PortValue::Fixed(p)),
            _ => Err(format!(
                "`{text}` is not a port; write a number from 1 to 65535, `auto`, or dstack's `80:8000`"
            )),
        }
    }
}

impl<'de> Deserialize<'de> for PortValue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = PortValue;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a port number, `auto`, `80:8000` or {container_port: 8000}")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<PortValue, E> {
                PortValue::parse(v).map_err(E::custom)
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<PortValue, E> {
                PortValue::parse(&v.to_string()).map_err(E::custom)
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<PortValue, E> {
                PortValue::parse(&v.to_string()).map_err(E::custom)
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<PortValue, E> {
                PortValue::parse(&v.to_string()).map_err(E::custom)
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<PortValue, A::Error> {
                let mut port = None;
                while let Some(k) = map.next_key::<String>()? {
                    let v: Scalar = map.next_value()?;
                    match k.as_str() {
                        "container_port" => port = Some(v.0),
                        "local_port" => {}
                        other => {
                            return Err(de::Error::unknown_field(
                                other,
                                &["container_port", "local_port"],
                            ));
                        }
                    }
                }
                let port = port.ok_or_else(|| de::Error::missing_field("container_port"))?;
                PortValue::parse(&port).map_err(de::Error::custom)
            }
        }
        d.deserialize_any(V)
    }
}

impl Serialize for PortValue {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            PortValue::Fixed(p) => s.serialize_u16(*p),
            PortValue::Auto => s.serialize_str("auto"),
        }
    }
}

pub use super::resources::{GpuValue, parse_gpu, vendor_of};

/// One `env` entry; the value may hold templates and `${{ secrets.NAME }}` references.
#[derive(Debug, Clone)]
pub struct EnvEntry {
    pub name: String,
    pub value: Spanned<String>,
}

/// `env` as dstack writes it (a list of `KEY=VALUE`) or as a map; both keep task order.
#[derive(Debug, Clone, Default)]
pub struct EnvList(pub Vec<EnvEntry>);

impl<'de> Deserialize<'de> for EnvList {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = EnvList;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a map of NAME: value or a list of \"NAME=value\"")
            }
            fn visit_unit<E: de::Error>(self) -> Result<EnvList, E> {
                Ok(EnvList::default())
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<EnvList, A::Error> {
                let mut out = Vec::new();
                let mut seen = std::collections::HashSet::new();
                while let Some(item) = seq.next_element::<Spanned<Scalar>>()? {
                    // dstack's `- NAME` passes NAME through from orchestrate's environment,
                    // which is what a secret reference does (an unset NAME is an error).
                    let passthrough;
                    let (name, value) = match item.value.0.split_once('=') {
                        Some(pair) => pair,
                        None => {
                            passthrough = format!("${{{{ secrets.{} }}}}", item.value.0);
                            (item.value.0.as_str(), passthrough.as_str())
                        }
                    };
                    check_env_name(name).map_err(de::Error::custom)?;
                    if !seen.insert(name.to_string()) {
                        return Err(de::Error::custom(format!(
                            "env `{name}` is set twice; keep one `{name}=...` entry"
                        )));
                    }
                    out.push(EnvEntry {
                        name: name.to_string(),
                        value: Spanned {
                            value: value.to_string(),
                            referenced: item.referenced,
                            defined: item.defined,
                        },
                    });
                }
                Ok(EnvList(out))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<EnvList, A::Error> {
                let mut out = Vec::new();
                while let Some(name) = map.next_key::<String>()? {
                    check_env_name(&name).map_err(de::Error::custom)?;
                    let v: Spanned<Scalar> = map.next_value()?;
                    out.push(EnvEntry {
                        name,
                        value: Spanned {
                            value: v.value.0,
                            referenced: v.referenced,
                            defined: v.defined,
                        },
                    });
                }
                Ok(EnvList(out))
            }
        }
        d.deserialize_any(V)
    }
}

fn check_env_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "`{name}` is not an environment variable name; use letters, digits and _"
        ))
    }
}

impl Serialize for EnvList {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for e in &self.0 {
            m.serialize_entry(&e.name, &e.value.value)?;
        }
        m.end()
    }
}

/// `benchmark.goodput`: SLOs as `vllm bench serve --goodput` takes them, written as its
/// string (`"ttft:200 tpot:50"`), a list of its items (`["ttft:200", "tpot:50"]`) or a map
/// (`{ttft: 200ms, tpot: 50}`; a bare number is milliseconds). Kept in written order.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct GoodputValue(pub Vec<Slo>);

impl<'de> Deserialize<'de> for GoodputValue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = GoodputValue;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("SLOs like \"ttft:200 tpot:50\" or {ttft: 200ms, tpot: 50ms}")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<GoodputValue, E> {
                parse_slos(v).map(GoodputValue).map_err(E::custom)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<GoodputValue, A::Error> {
                let mut items = Vec::new();
                while let Some(item) = seq.next_element::<Scalar>()? {
                    items.push(item.0);
                }
                parse_slos(&items.join(" "))
                    .map(GoodputValue)
                    .map_err(de::Error::custom)
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<GoodputValue, A::Error> {
                let mut out = Vec::new();
                while let Some(key) = map.next_key::<String>()? {
                    let value: Scalar = map.next_value()?;
                    let s = slo(&key, &value.0)
                        .map_err(|e| de::Error::custom(format!("goodput `{key}`: {e}")))?;
                    out.push(s);
                    no_repeats(&out).map_err(de::Error::custom)?;
                }
                if out.is_empty() {
                    return Err(de::Error::custom(
                        "no SLO given; write e.g. {ttft: 200ms, tpot: 50ms}",
                    ));
                }
                Ok(GoodputValue(out))
            }
        }
        d.deserialize_any(V)
    }
}

impl Serialize for GoodputValue {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for slo in &self.0 {
            m.serialize_entry(slo.metric.name(), &slo.ms)?;
        }
        m.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bare_env_name_passes_the_value_through() {
        let env: EnvList = serde_saphyr::from_str("- HF_TOKEN\n- A=1\n").unwrap();
        assert_eq!(env.0[0].name, "HF_TOKEN");
        assert_eq!(env.0[0].value.value, "${{ secrets.HF_TOKEN }}");
        assert_eq!(env.0[1].value.value, "1");
        assert!(serde_saphyr::from_str::<EnvList>("- 1BAD\n").is_err());
    }

    fn goodput(yaml: &str) -> Result<GoodputValue, String> {
        serde_saphyr::from_str::<GoodputValue>(yaml).map_err(|e| e.to_string())
    }

    #[test]
    fn goodput_takes_vllms_string_a_list_and_a_map() {
        let want = vec![
            Slo {
                metric: crate::load::SloMetric::Ttft,
                ms: 200.0,
            },
            Slo {
                metric: crate::load::SloMetric::Tpot,
                ms: 50.0,
            },
        ];
        assert_eq!(goodput("\"ttft:200 tpot:50\"").unwrap().0, want);
        assert_eq!(goodput("ttft:200,tpot:50").unwrap().0, want);
        assert_eq!(goodput("[\"ttft:200\", \"tpot:50\"]").unwrap().0, want);
        assert_eq!(goodput("{ttft: 200ms, tpot: 50}").unwrap().0, want);
        assert_eq!(goodput("{ttft: 0.2s, tpot: 0.05s}").unwrap().0, want);
        let e2el = goodput("{e2el: 1.5s}").unwrap().0;
        assert_eq!(e2el[0].ms, 1500.0);
        let json = serde_json::to_value(GoodputValue(want)).unwrap();
        assert_eq!(json, serde_json::json!({"ttft": 200.0, "tpot": 50.0}));
    }

    #[test]
    fn bad_goodput_says_what_to_write() {
        for (yaml, says) in [
            ("ttft200", "write KEY:MS"),
            ("\"itl:5\"", "must be ttft, tpot or e2el"),
            ("{ttft: fast}", "not a number of milliseconds"),
            ("{ttft: -5}", "non-negative"),
            ("\"ttft:1 ttft:2\"", "given twice"),
            ("{ttft: 1, ttft: 2}", "ttft"),
            ("{}", "no SLO given"),
            ("\"\"", "no SLO given"),
        ] {
            let e = goodput(yaml).unwrap_err();
            assert!(e.contains(says), "{yaml}: {e}");
        }
    }
}
