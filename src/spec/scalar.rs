//! The scalar every other task-file value starts from: a number, a bool or a string kept as
//! written, since it may be a template the plan resolves.

use std::fmt;

use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};

/// A scalar kept as written: a number, a bool or a string that may be a minijinja template
/// (`"{{ concurrency * 4 }}"`). Parsed into its final type when the plan is built.
#[derive(Debug, Clone, PartialEq)]
pub struct Scalar(pub String);

impl<'de> Deserialize<'de> for Scalar {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Scalar;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a number, a string or a template")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Scalar, E> {
                Ok(Scalar(v.to_string()))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Scalar, E> {
                Ok(Scalar(v.to_string()))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Scalar, E> {
                Ok(Scalar(v.to_string()))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Scalar, E> {
                Ok(Scalar(if v.is_infinite() && v > 0.0 {
                    "inf".to_string()
                } else {
                    v.to_string()
                }))
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<Scalar, E> {
                Ok(Scalar(v.to_string()))
            }
        }
        d.deserialize_any(V)
    }
}

impl Serialize for Scalar {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if let Ok(n) = self.0.parse::<u64>() {
            s.serialize_u64(n)
        } else if let Ok(f) = self
            .0
            .parse::<f64>()
            .map_err(|_| ())
            .and_then(|f| if f.is_finite() { Ok(f) } else { Err(()) })
        {
            s.serialize_f64(f)
        } else {
            s.serialize_str(&self.0)
        }
    }
}
