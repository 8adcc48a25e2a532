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
