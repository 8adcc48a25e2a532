//! What a host must have besides GPUs: `resources.cpu` (`8`, `2..`, `arm:8`, `x86:4..16`,
//! `{arch, count}`) and `resources.disk` (`200GB`, `2000GB..`, `{size: ...}`).

use std::fmt;

use serde::Serialize;
use serde::de::{self, Deserialize, Deserializer, MapAccess, Visitor};

use super::range::{CountRange, SizeRange, join_range};
use crate::spec::scalar::Scalar;

/// `resources.cpu`: `8`, `2..`, `arm:8`, `x86:4..16` or `{arch, count}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CpuValue {
    /// `x86` or `arm`, when asked for.
    pub arch: Option<String>,
    pub count: CountRange,
}

fn parse_cpu(s: &str) -> Result<CpuValue, String> {
    let mut arch = None;
    let mut count = None;
    let text: String = s.chars().filter(|c| !c.is_whitespace()).collect();
    for token in text.split(':') {
        match token.to_ascii_lowercase().as_str() {
            "x86" | "x86_64" | "amd64" => arch = Some("x86".to_string()),
            "arm" | "arm64" | "aarch64" => arch = Some("arm".to_string()),
            _ => {
                let c = CountRange::parse(token).map_err(|_| {
                    format!("`{s}` is not a CPU request; write a count like 8 or 2.., optionally with x86: or arm:")
                })?;
                if count.replace(c).is_some() {
                    return Err(format!("`{s}` has two CPU counts"));
                }
            }
        }
    }
    Ok(CpuValue {
        arch,
        count: count.unwrap_or(CountRange { min: 2, max: None }),
    })
}

impl<'de> Deserialize<'de> for CpuValue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = CpuValue;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a CPU request like 8, 2.., arm:8 or {arch: arm, count: 8}")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<CpuValue, E> {
                parse_cpu(&v.to_string()).map_err(E::custom)
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<CpuValue, E> {
                parse_cpu(&v.to_string()).map_err(E::custom)
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<CpuValue, E> {
                parse_cpu(v).map_err(E::custom)
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<CpuValue, A::Error> {
                let mut out = CpuValue {
                    arch: None,
                    count: CountRange { min: 2, max: None },
                };
                let (mut min, mut max) = (None, None);
                while let Some(k) = map.next_key::<String>()? {
                    match k.as_str() {
                        "arch" => {
                            let a: String = map.next_value()?;
                            out.arch = parse_cpu(&format!("{a}:1"))
                                .map_err(de::Error::custom)?
                                .arch;
                            if out.arch.is_none() {
                                return Err(de::Error::custom(format!(
                                    "`{a}` is not a CPU architecture; write x86 or arm"
                                )));
                            }
                        }
                        "count" => out.count = map.next_value()?,
                        "min" => min = Some(map.next_value::<Scalar>()?.0),
                        "max" => max = Some(map.next_value::<Scalar>()?.0),
                        other => {
                            return Err(de::Error::unknown_field(
                                other,
                                &["arch", "count", "min", "max"],
                            ));
                        }
                    }
                }
                if min.is_some() || max.is_some() {
                    out.count =
                        CountRange::parse(&join_range(min, max)).map_err(de::Error::custom)?;
                }
                Ok(out)
            }
        }
        d.deserialize_any(V)
    }
}

/// `resources.disk`: `200GB`, `2000GB..` or `{size: 200GB..}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct DiskValue {
    pub size: SizeRange,
}

impl<'de> Deserialize<'de> for DiskValue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = DiskValue;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a disk size like 200GB, a range 200GB.. or {size: 200GB..}")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<DiskValue, E> {
                self.visit_str(&v.to_string())
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<DiskValue, E> {
                self.visit_str(&v.to_string())
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<DiskValue, E> {
                self.visit_str(&v.to_string())
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<DiskValue, E> {
                SizeRange::parse(v)
                    .map(|size| DiskValue { size })
                    .map_err(E::custom)
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<DiskValue, A::Error> {
                let mut size = None;
                while let Some(k) = map.next_key::<String>()? {
                    if k != "size" {
                        return Err(de::Error::unknown_field(&k, &["size"]));
                    }
                    size = Some(map.next_value::<SizeRange>()?);
                }
                size.map(|size| DiskValue { size })
                    .ok_or_else(|| de::Error::missing_field("size"))
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_and_disk_forms_parse() {
        let c: CpuValue = serde_saphyr::from_str("arm:8").unwrap();
        assert_eq!(
            (c.arch.as_deref(), c.count),
            (Some("arm"), CountRange::exactly(8))
        );
        let c: CpuValue = serde_saphyr::from_str("{min: 4}").unwrap();
        assert_eq!(c.count, CountRange { min: 4, max: None });
        let d: DiskValue = serde_saphyr::from_str("2000GB..").unwrap();
        assert_eq!(
            d.size,
            SizeRange {
                min: Some(2_000_000_000_000),
                max: None
            }
        );
        let d: DiskValue = serde_saphyr::from_str("{size: 200}").unwrap();
        assert_eq!(d.size.min, Some(200_000_000_000));
        assert!(serde_saphyr::from_str::<DiskValue>("lots").is_err());
    }
}
