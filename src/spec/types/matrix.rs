//! `benchmark.matrix`: the sweep axes in file order, with `include` and `exclude` entries
//! and where each is written.

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_saphyr::Spanned;

/// One sweep axis: its name (with location) and its values.
#[derive(Debug, Clone)]
pub struct AxisSpec {
    pub name: Spanned<String>,
    pub values: Vec<serde_json::Value>,
}

/// `benchmark.matrix`: axes in file order, plus GitHub-Actions-like `include`/`exclude`.
#[derive(Debug, Clone, Default)]
pub struct MatrixSpec {
    pub axes: Vec<AxisSpec>,
    pub include: Vec<serde_json::Map<String, serde_json::Value>>,
    pub exclude: Vec<serde_json::Map<String, serde_json::Value>>,
    /// Where each `include` entry is written (same order as `include`).
    pub(crate) include_locs: Vec<serde_saphyr::Location>,
    /// Where each `exclude` entry is written (same order as `exclude`).
    pub(crate) exclude_locs: Vec<serde_saphyr::Location>,
}

type Entries = Vec<Spanned<serde_json::Map<String, serde_json::Value>>>;

/// `include`/`exclude` entries and where each is written.
fn split_entries(
    entries: Entries,
) -> (
    Vec<serde_json::Map<String, serde_json::Value>>,
    Vec<serde_saphyr::Location>,
) {
    entries.into_iter().map(|e| (e.value, e.referenced)).unzip()
}

impl<'de> Deserialize<'de> for MatrixSpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = MatrixSpec;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a map of axis name -> list of values, with optional include/exclude")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<MatrixSpec, A::Error> {
                let mut out = MatrixSpec::default();
                while let Some(name) = map.next_key::<Spanned<String>>()? {
                    match name.value.as_str() {
                        "include" => {
                            (out.include, out.include_locs) =
                                split_entries(map.next_value::<Entries>()?);
                        }
                        "exclude" => {
                            (out.exclude, out.exclude_locs) =
                                split_entries(map.next_value::<Entries>()?);
                        }
                        _ => {
                            let values: Vec<serde_json::Value> = map.next_value()?;
                            if values.is_empty() {
                                return Err(de::Error::custom(format!(
                                    "axis `{}` has no values",
                                    name.value
                                )));
                            }
                            if let Some(bad) = values.iter().find(|v| v.is_object() || v.is_array())
                            {
                                return Err(de::Error::custom(format!(
                                    "axis `{}` has a value that is not a number, string or bool: {bad}",
                                    name.value
                                )));
                            }
                            out.axes.push(AxisSpec { name, values });
                        }
                    }
                }
                Ok(out)
            }
        }
        d.deserialize_map(V)
    }
}

impl Serialize for MatrixSpec {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(None)?;
        for a in &self.axes {
            m.serialize_entry(&a.name.value, &a.values)?;
        }
        if !self.include.is_empty() {
            m.serialize_entry("include", &self.include)?;
        }
        if !self.exclude.is_empty() {
            m.serialize_entry("exclude", &self.exclude)?;
        }
        m.end()
    }
}
