//! Count and size ranges as dstack writes them: `8` (exactly 8), `1..8`, `2..`, `80GB..`
//! or `{min, max}`; a bare size is gigabytes.

use std::fmt;

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::{Deserialize, Serialize};

use crate::units;

/// A whole-number range: `8` (exactly 8), `1..8`, `2..` or `{min: 1, max: 8}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct CountRange {
    pub min: u32,
    /// `None`: no upper bound.
    pub max: Option<u32>,
}

impl CountRange {
    /// Exactly `n`.
    pub fn exactly(n: u32) -> Self {
        Self {
            min: n,
            max: Some(n),
        }
    }

    /// Whether `n` is in the range.
    pub fn contains(&self, n: u32) -> bool {
        n >= self.min && self.max.is_none_or(|m| n <= m)
    }

    /// Parse `8`, `1..8`, `2..` or `..8`.
    pub fn parse(text: &str) -> Result<Self, String> {
        let t: String = text.chars().filter(|c| !c.is_whitespace()).collect();
        let bad = || format!("`{text}` is not a count; write 8, a range 1..8, or 2..");
        let num = |s: &str| -> Result<Option<u32>, String> {
            if s.is_empty() {
                Ok(None)
            } else {
                s.parse::<u32>().map(Some).map_err(|_| bad())
            }
        };
        let (min, max) = match t.split_once("..") {
            Some((a, b)) => (num(a)?, num(b)?),
            None => {
                let n = num(&t)?.ok_or_else(bad)?;
                (Some(n), Some(n))
            }
        };
        if min.is_none() && max.is_none() {
            return Err(bad());
        }
        let min = min.unwrap_or(0);
        if max.is_some_and(|m| m < min) {
            return Err(format!(
                "`{text}` is an empty range; write the smaller number first"
            ));
        }
        Ok(Self { min, max })
    }
}

impl fmt::Display for CountRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.max {
            Some(m) if m == self.min => write!(f, "{m}"),
            Some(m) => write!(f, "{}..{m}", self.min),
            None => write!(f, "{}..", self.min),
        }
    }
}

/// A size range in bytes: `80GB`, `80GB..`, `..1TB`, `16GB..80GB` or `{min, max}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct SizeRange {
    pub min: Option<u64>,
    pub max: Option<u64>,
}

/// One size as dstack writes it: a bare number is gigabytes.
fn parse_one_size(s: &str) -> Result<u64, String> {
    if !s.is_empty() && s.chars().all(|c| c.is_ascii_digit() || c == '.') {
        return units::parse_size(&format!("{s}GB")).map_err(|e| e.to_string());
    }
    units::parse_size(s).map_err(|e| e.to_string())
}

impl SizeRange {
    /// Whether `bytes` is in the range.
    pub fn contains(&self, bytes: u64) -> bool {
        self.min.is_none_or(|m| bytes >= m) && self.max.is_none_or(|m| bytes <= m)
    }

    /// Parse `80GB`, `80GB..`, `..1TB` or `16GB..80GB`.
    pub fn parse(text: &str) -> Result<Self, String> {
        let t: String = text.chars().filter(|c| !c.is_whitespace()).collect();
        let opt = |s: &str| -> Result<Option<u64>, String> {
            if s.is_empty() {
                Ok(None)
            } else {
                parse_one_size(s).map(Some)
            }
        };
        let (min, max) = match t.split_once("..") {
            Some((a, b)) => (opt(a)?, opt(b)?),
            None => {
                let n = parse_one_size(&t)?;
                (Some(n), Some(n))
            }
        };
        if min.is_none() && max.is_none() {
            return Err(format!(
                "`{text}` is not a size; write 80GB, a range 16GB..80GB, or 80GB.."
            ));
        }
        if let (Some(a), Some(b)) = (min, max)
            && b < a
        {
            return Err(format!(
                "`{text}` is an empty range; write the smaller size first"
            ));
        }
        Ok(Self { min, max })
    }
}

impl fmt::Display for SizeRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let gb = |b: u64| {
            let g = b as f64 / 1e9;
            if g.fract() == 0.0 {
                format!("{g}GB")
            } else {
                format!("{g:.1}GB")
            }
        };
        match (self.min, self.max) {
            (Some(a), Some(b)) if a == b => write!(f, "{}", gb(a)),
            (Some(a), Some(b)) => write!(f, "{}..{}", gb(a), gb(b)),
            (Some(a), None) => write!(f, "{}..", gb(a)),
            (None, Some(b)) => write!(f, "..{}", gb(b)),
            (None, None) => f.write_str(".."),
        }
    }
}

/// Visits a scalar (or a `{min, max}` map) and parses it with `parse`.
struct RangeVisitor<T>(
    fn(&str) -> Result<T, String>,
    fn(Option<String>, Option<String>) -> String,
);

impl<'de, T> Visitor<'de> for RangeVisitor<T> {
    type Value = T;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a value, a range like 1..8 or 80GB.., or {min, max}")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<T, E> {
        (self.0)(v).map_err(E::custom)
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<T, E> {
        (self.0)(&v.to_string()).map_err(E::custom)
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<T, E> {
        (self.0)(&v.to_string()).map_err(E::custom)
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<T, E> {
        (self.0)(&v.to_string()).map_err(E::custom)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<T, A::Error> {
        let (mut min, mut max) = (None, None);
        while let Some(k) = map.next_key::<String>()? {
            let v: crate::spec::scalar::Scalar = map.next_value()?;
            match k.as_str() {
                "min" => min = Some(v.0),
                "max" => max = Some(v.0),
                other => {
                    return Err(de::Error::unknown_field(other, &["min", "max"]));
                }
            }
        }
        (self.0)(&(self.1)(min, max)).map_err(de::Error::custom)
    }
}

pub(super) fn join_range(min: Option<String>, max: Option<String>) -> String {
    format!("{}..{}", min.unwrap_or_default(), max.unwrap_or_default())
}

impl<'de> Deserialize<'de> for CountRange {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(RangeVisitor(CountRange::parse, join_range))
    }
}

impl<'de> Deserialize<'de> for SizeRange {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(RangeVisitor(SizeRange::parse, join_range))
    }
}
