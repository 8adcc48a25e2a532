//! `resources.gpu` in every dstack form (`MI300X`, `8:H200`, `H100:8`, `24GB`, `1..8`,
//! `A100,H100:2`, `{name: [H100, H200], count: 8, memory: 80GB..}`), and the vendor a GPU
//! model name belongs to.

use std::fmt;

use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};

use super::range::{CountRange, SizeRange};
use crate::deploy::GpuVendor;

/// `resources.gpu` in any of dstack's forms.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GpuValue {
    /// The fewest GPUs; what is allocated unless the chosen host's count is known and in range.
    pub count: u32,
    /// The most GPUs (`None`: no bound).
    pub count_max: Option<u32>,
    /// Accepted model names (any when empty).
    pub names: Vec<String>,
    pub vendor: GpuVendor,
    /// The vendor was asked for (by a vendor word or a model name); otherwise any will do.
    #[serde(skip)]
    pub vendor_given: bool,
    /// Memory of each GPU.
    pub memory: Option<SizeRange>,
    /// Memory of all the GPUs together.
    pub total_memory: Option<SizeRange>,
    /// The lowest CUDA compute capability, `major.minor`.
    pub compute_capability: Option<String>,
}

impl GpuValue {
    /// The count as a range.
    pub fn count_range(&self) -> CountRange {
        CountRange {
            min: self.count,
            max: self.count_max,
        }
    }

    /// The request as dstack would write it: `8:H200`, `1..:24GB..`, `amd:MI300X:8`.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if !self.names.is_empty() {
            parts.push(self.names.join(","));
        }
        if let Some(m) = &self.memory {
            parts.push(m.to_string());
        }
        parts.push(self.count_range().to_string());
        let mut text = parts.join(":");
        if let Some(t) = &self.total_memory {
            text.push_str(&format!(" (total memory {t})"));
        }
        if let Some(c) = &self.compute_capability {
            text.push_str(&format!(" (compute capability {c}+)"));
        }
        text
    }
}

/// The vendor a GPU model name belongs to (AMD Instinct names start with `MI`).
pub fn vendor_of(names: &[String]) -> GpuVendor {
    if names.iter().any(|n| is_amd_name(n)) {
        GpuVendor::Amd
    } else {
        GpuVendor::Nvidia
    }
}

fn is_amd_name(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    upper.starts_with("MI") || upper.contains("RADEON") || upper.contains("INSTINCT")
}

/// A vendor word of a GPU request (`nvidia`, `amd`; dstack's others are refused).
fn vendor_word(token: &str) -> Option<Result<GpuVendor, String>> {
    match token.to_ascii_lowercase().as_str() {
        "nvidia" => Some(Ok(GpuVendor::Nvidia)),
        "amd" => Some(Ok(GpuVendor::Amd)),
        "google" | "tpu" | "intel" | "tt" | "tenstorrent" => Some(Err(format!(
            "`{token}` accelerators are not supported; orchestrate drives NVIDIA and AMD GPUs"
        ))),
        _ => None,
    }
}

/// The parts of a GPU request before the defaults are applied.
#[derive(Default)]
struct GpuParts {
    vendor: Option<GpuVendor>,
    names: Option<Vec<String>>,
    count: Option<CountRange>,
    memory: Option<SizeRange>,
    total_memory: Option<SizeRange>,
    compute_capability: Option<String>,
}

impl GpuParts {
    fn finish(self) -> Result<GpuValue, String> {
        let names = self.names.unwrap_or_default();
        let amd = names.iter().filter(|n| is_amd_name(n)).count();
        if amd > 0 && amd < names.len() {
            return Err(format!(
                "`{}` mixes AMD and NVIDIA models; one request takes GPUs of one vendor",
                names.join(",")
            ));
        }
        let from_names = (!names.is_empty()).then(|| vendor_of(&names));
        let vendor = match (self.vendor, from_names) {
            (Some(v), Some(n)) if v != n => {
                return Err(format!(
                    "`{}` are not {} GPUs",
                    names.join(","),
                    vendor_name(v)
                ));
            }
            (Some(v), _) => v,
            (None, Some(n)) => n,
            (None, None) => GpuVendor::Nvidia,
        };
        // dstack's default count is `1..`; a bare `gpu: 8` is exactly 8.
        let count = self.count.unwrap_or(CountRange { min: 1, max: None });
        Ok(GpuValue {
            count: count.min,
            count_max: count.max,
            vendor_given: self.vendor.is_some() || !names.is_empty(),
            names,
            vendor,
            memory: self.memory,
            total_memory: self.total_memory,
            compute_capability: self.compute_capability,
        })
    }
}

fn vendor_name(v: GpuVendor) -> &'static str {
    match v {
        GpuVendor::Nvidia => "NVIDIA",
        GpuVendor::Amd => "AMD",
    }
}

/// Parse the string form of `resources.gpu` (dstack's `:`-separated tokens in any order:
/// vendor, names, memory, count).
pub fn parse_gpu(s: &str) -> Result<GpuValue, String> {
    let bad = |why: &str| {
        format!(
            "`{s}` is not a GPU request ({why}); write a model and a count like \"8:H200\", a memory like 24GB, or a count like 1..8"
        )
    };
    let text: String = s.chars().filter(|c| !c.is_whitespace()).collect();
    let mut parts = GpuParts::default();
    for token in text.split(':') {
        if token.is_empty() {
            return Err(bad("an empty part"));
        }
        if let Some(vendor) = vendor_word(token) {
            if parts.vendor.replace(vendor?).is_some() {
                return Err(bad("two vendors"));
            }
        } else if token.starts_with(|c: char| c.is_ascii_alphabetic()) {
            let names: Vec<String> = token.split(',').map(str::to_string).collect();
            if names
                .iter()
                .any(|n| n.is_empty() || !n.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'))
            {
                return Err(bad(
                    "a model name is empty or has other characters than letters, digits and -",
                ));
            }
            if parts.names.replace(names).is_some() {
                return Err(bad("two model names"));
            }
        } else if token.chars().any(|c| c.is_ascii_alphabetic()) {
            let memory = SizeRange::parse(token).map_err(|e| bad(&e))?;
            if parts.memory.replace(memory).is_some() {
                return Err(bad("two memory sizes"));
            }
        } else {
            let count = CountRange::parse(token).map_err(|e| bad(&e))?;
            if parts.count.replace(count).is_some() {
                return Err(bad("two counts"));
            }
        }
    }
    parts.finish()
}

/// `name:` of the map form: one name or a list.
struct Names(Vec<String>);

impl<'de> Deserialize<'de> for Names {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Names;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a GPU model name or a list of names")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Names, E> {
                Ok(Names(vec![v.to_string()]))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Names, A::Error> {
                let mut out = Vec::new();
                while let Some(n) = seq.next_element::<String>()? {
                    out.push(n);
                }
                Ok(Names(out))
            }
        }
        d.deserialize_any(V)
    }
}

/// The map form of `resources.gpu`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GpuMap {
    #[serde(default)]
    vendor: Option<String>,
    #[serde(default)]
    name: Option<Names>,
    #[serde(default)]
    count: Option<CountRange>,
    #[serde(default)]
    memory: Option<SizeRange>,
    #[serde(default)]
    total_memory: Option<SizeRange>,
    #[serde(default)]
    compute_capability: Option<crate::spec::scalar::Scalar>,
}

impl GpuMap {
    fn into_value(self) -> Result<GpuValue, String> {
        let vendor = match self.vendor {
            None => None,
            Some(v) => Some(vendor_word(&v).unwrap_or_else(|| {
                Err(format!("`{v}` is not a GPU vendor; write nvidia or amd"))
            })?),
        };
        let compute_capability = match self.compute_capability {
            None => None,
            Some(c) => {
                // YAML reads `8.0` as the number 8.
                let c = if c.0.parse::<u32>().is_ok() {
                    crate::spec::scalar::Scalar(format!("{}.0", c.0))
                } else {
                    c
                };
                let ok =
                    c.0.split_once('.')
                        .is_some_and(|(a, b)| a.parse::<u32>().is_ok() && b.parse::<u32>().is_ok());
                if !ok {
                    return Err(format!(
                        "`{}` is not a compute capability; write major.minor like 8.0",
                        c.0
                    ));
                }
                Some(c.0)
            }
        };
        GpuParts {
            vendor,
            names: self.name.map(|n| n.0).filter(|n| !n.is_empty()),
            count: self.count,
            memory: self.memory,
            total_memory: self.total_memory,
            compute_capability,
        }
        .finish()
    }
}

impl<'de> Deserialize<'de> for GpuValue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = GpuValue;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a GPU request like \"8:H200\", 8 or {count: 8, name: H200}")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<GpuValue, E> {
                let count = u32::try_from(v).map_err(|_| E::custom("too many GPUs"))?;
                GpuParts {
                    count: Some(CountRange::exactly(count)),
                    ..GpuParts::default()
                }
                .finish()
                .map_err(E::custom)
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<GpuValue, E> {
                let v =
                    u64::try_from(v).map_err(|_| E::custom("a GPU count cannot be negative"))?;
                self.visit_u64(v)
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<GpuValue, E> {
                parse_gpu(v).map_err(E::custom)
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<GpuValue, A::Error> {
                let m = GpuMap::deserialize(de::value::MapAccessDeserializer::new(map))?;
                m.into_value().map_err(de::Error::custom)
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu(s: &str) -> GpuValue {
        parse_gpu(s).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn every_dstack_string_form_parses() {
        let g = gpu("MI300X");
        assert_eq!((g.count, g.count_max, g.vendor), (1, None, GpuVendor::Amd));
        assert_eq!(g.names, ["MI300X"]);
        let g = gpu("8:H200");
        assert_eq!(
            (g.count, g.count_max, g.vendor),
            (8, Some(8), GpuVendor::Nvidia)
        );
        let g = gpu("H100:8");
        assert_eq!(
            (g.count, g.count_max, g.names.clone()),
            (8, Some(8), vec!["H100".to_string()])
        );
        let g = gpu("24GB");
        assert!(g.names.is_empty());
        assert_eq!(
            g.memory,
            Some(SizeRange {
                min: Some(24_000_000_000),
                max: Some(24_000_000_000)
            })
        );
        assert_eq!((g.count, g.count_max), (1, None));
        let g = gpu("1..8");
        assert_eq!((g.count, g.count_max), (1, Some(8)));
        let g = gpu("A100,H100:2");
        assert_eq!(g.names, ["A100", "H100"]);
        assert_eq!((g.count, g.count_max), (2, Some(2)));
        let g = gpu("amd:MI300X:80GB..:2..");
        assert_eq!(g.memory.unwrap().min, Some(80_000_000_000));
        assert_eq!((g.count, g.count_max, g.vendor), (2, None, GpuVendor::Amd));
    }

    #[test]
    fn conflicting_or_foreign_gpu_strings_are_refused() {
        for bad in [
            "8:8",
            "abc:H200",
            "8:",
            "H100,MI300X",
            "nvidia:MI300X",
            "tpu:v5",
            "9..2",
        ] {
            assert!(parse_gpu(bad).is_err(), "{bad} should be refused");
        }
        // dstack ignores blanks inside the request.
        assert_eq!(gpu("8 : H200").names, ["H200"]);
    }

    #[test]
    fn the_map_form_takes_lists_ranges_and_memory() {
        let g: GpuValue =
            serde_saphyr::from_str("{name: [H100, H200], count: 8, memory: 80GB..}").unwrap();
        assert_eq!(g.names, ["H100", "H200"]);
        assert_eq!((g.count, g.count_max), (8, Some(8)));
        assert_eq!(g.memory.unwrap().min, Some(80_000_000_000));
        let g: GpuValue =
            serde_saphyr::from_str("{count: {min: 2, max: 4}, compute_capability: 8.0}").unwrap();
        assert_eq!((g.count, g.count_max), (2, Some(4)));
        assert_eq!(g.compute_capability.as_deref(), Some("8.0"));
        assert!(serde_saphyr::from_str::<GpuValue>("{count: 8, vendr: amd}").is_err());
        assert_eq!(g.describe(), "2..4 (compute capability 8.0+)");
    }
}
