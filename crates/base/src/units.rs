//! Human units in task and hosts files: durations ("45m", "90s", "1h30m", "250ms") and byte
//! sizes ("32GB", "16Gi", "512MiB"), with serde helpers for writing them back; and the one
//! way reports, validity thresholds and check print a number (`number`); and quoting for a
//! POSIX shell (`shell_quote`).

use std::time::Duration;

/// Errors parsing a unit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UnitError {
    #[error(
        "`{input}` is not a duration; write a number with a unit, like 90s, 45m, 1h30m or 250ms"
    )]
    Duration { input: String },
    #[error("`{input}` is longer than {MAX_DURATION_DAYS} days; write a shorter duration")]
    DurationTooLong { input: String },
    #[error("`{input}` is not a size; write a number with a unit, like 32GB, 16Gi or 512MiB")]
    Size { input: String },
    #[error("`{input}` is larger than 16 EiB; write a smaller size")]
    SizeTooLarge { input: String },
}

/// Quote `text` for a POSIX shell: as is when only safe characters, else in single quotes.
pub fn shell_quote(text: &str) -> String {
    if !text.is_empty()
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./=:@%+,".contains(&b))
    {
        return text.to_string();
    }
    format!("'{}'", text.replace('\'', r"'\''"))
}

/// The longest duration accepted anywhere (a year): longer ones are typos, and they would
/// overflow a deadline computed from now.
pub const MAX_DURATION_DAYS: u64 = 365;

/// `secs` as a duration, or an error when it is negative, not finite or over the maximum.
fn bounded_duration(secs: f64, input: &str) -> Result<Duration, UnitError> {
    if !secs.is_finite() || secs < 0.0 {
        return Err(UnitError::Duration {
            input: input.to_string(),
        });
    }
    if secs > (MAX_DURATION_DAYS * 86_400) as f64 {
        return Err(UnitError::DurationTooLong {
            input: input.to_string(),
        });
    }
    Ok(Duration::from_secs_f64(secs))
}

/// Parse "45m", "90s", "1h30m", "250ms", "2d", "1.5h"; a bare number is seconds.
pub fn parse_duration(input: &str) -> Result<Duration, UnitError> {
    let err = || UnitError::Duration {
        input: input.to_string(),
    };
    let s = input.trim();
    if s.is_empty() {
        return Err(err());
    }
    if let Ok(secs) = s.parse::<f64>() {
        return bounded_duration(secs, input);
    }
    let mut total = 0f64;
    let mut rest = s;
    while !rest.is_empty() {
        let num_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(err)?;
        if num_end == 0 {
            return Err(err());
        }
        let value: f64 = rest[..num_end].parse().map_err(|_| err())?;
        rest = &rest[num_end..];
        let unit_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let factor = match rest[..unit_end].trim() {
            "ms" => 0.001,
            "s" | "sec" | "secs" => 1.0,
            "m" | "min" | "mins" => 60.0,
            "h" | "hr" | "hrs" => 3600.0,
            "d" => 86400.0,
            _ => return Err(err()),
        };
        total += value * factor;
        rest = &rest[unit_end..];
    }
    bounded_duration(total, input)
}

/// Parse "32GB" (10^9), "16Gi"/"16GiB" (2^30), "512MB", "1024"; a bare number is bytes.
pub fn parse_size(input: &str) -> Result<u64, UnitError> {
    let err = || UnitError::Size {
        input: input.to_string(),
    };
    let s = input.trim();
    let num_end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    if num_end == 0 {
        return Err(err());
    }
    let value: f64 = s[..num_end].parse().map_err(|_| err())?;
    let factor: f64 = match s[num_end..].trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kb" => 1e3,
        "m" | "mb" => 1e6,
        "g" | "gb" => 1e9,
        "t" | "tb" => 1e12,
        "ki" | "kib" => 1024.0,
        "mi" | "mib" => 1024.0 * 1024.0,
        "gi" | "gib" => 1024.0 * 1024.0 * 1024.0,
        "ti" | "tib" => 1024.0f64.powi(4),
        _ => return Err(err()),
    };
    let bytes = (value * factor).round();
    if !bytes.is_finite() || bytes >= u64::MAX as f64 {
        return Err(UnitError::SizeTooLarge {
            input: input.to_string(),
        });
    }
    Ok(bytes as u64)
}

/// Write a duration the way users write them ("45m", "1h30m", "250ms", "0s").
pub fn format_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms == 0 {
        return "0s".to_string();
    }
    if !ms.is_multiple_of(1000) {
        return format!("{ms}ms");
    }
    let mut secs = d.as_secs();
    let mut out = String::new();
    for (unit, size) in [("h", 3600), ("m", 60), ("s", 1)] {
        if secs >= size {
            out.push_str(&format!("{}{unit}", secs / size));
            secs %= size;
        }
    }
    out
}

/// A number the way the seed tables print it: at most two decimals, no trailing zeros, `-`
/// for NaN and infinities.
pub fn number(v: f64) -> String {
    if !v.is_finite() {
        return "-".into();
    }
    let text = format!("{v:.2}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    if text == "-0" {
        "0".into()
    } else {
        text.into()
    }
}

/// `#[serde(with = "crate::units::serde_duration")]`: a duration as "45m".
pub mod serde_duration {
    use std::time::Duration;

    pub fn serialize<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&super::format_duration(*d))
    }

    pub fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let s: String = serde::Deserialize::deserialize(d)?;
        super::parse_duration(&s).map_err(serde::de::Error::custom)
    }
}

/// `#[serde(with = "crate::units::serde_opt_duration")]`: an optional duration as "45m" or null.
pub mod serde_opt_duration {
    use std::time::Duration;

    pub fn serialize<S: serde::Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_str(&super::format_duration(*d)),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: serde::Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Duration>, D::Error> {
        let s: Option<String> = serde::Deserialize::deserialize(d)?;
        s.map(|s| super::parse_duration(&s).map_err(serde::de::Error::custom))
            .transpose()
    }
}

/// An error with its causes on one line, `outer: inner: innermost`: what logs, records and
/// manifest fields keep of an error.
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_as_users_write_them() {
        assert_eq!(parse_duration("45m").unwrap(), Duration::from_secs(2700));
        assert_eq!(parse_duration("90s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("1h30m").unwrap(), Duration::from_secs(5400));
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("1.5h").unwrap(), Duration::from_secs(5400));
        assert_eq!(parse_duration("10").unwrap(), Duration::from_secs(10));
        for bad in ["", "m", "45x", "-1", "4 5m", "ten"] {
            assert!(parse_duration(bad).is_err(), "{bad} should not parse");
        }
    }

    #[test]
    fn sizes_parse_decimal_and_binary_units() {
        assert_eq!(parse_size("32GB").unwrap(), 32_000_000_000);
        assert_eq!(parse_size("16Gi").unwrap(), 16 * 1024 * 1024 * 1024);
        assert_eq!(parse_size("512MiB").unwrap(), 512 * 1024 * 1024);
        assert_eq!(parse_size("1024").unwrap(), 1024);
        for bad in ["", "GB", "32XB", "abc"] {
            assert!(parse_size(bad).is_err(), "{bad} should not parse");
        }
    }

    #[test]
    fn huge_values_are_errors_not_panics() {
        for huge in [
            "99999999999999999999d",
            "99999999999999999999",
            "366d",
            "1e300",
        ] {
            assert!(
                matches!(parse_duration(huge), Err(UnitError::DurationTooLong { .. })),
                "{huge}"
            );
        }
        assert_eq!(
            parse_duration("365d").unwrap(),
            Duration::from_secs(365 * 86_400)
        );
        assert!(matches!(
            parse_size("99999999999999999999TiB"),
            Err(UnitError::SizeTooLarge { .. })
        ));
    }

    #[test]
    fn durations_round_trip_through_their_written_form() {
        for s in ["45m", "1h30m", "250ms", "0s", "90s"] {
            let d = parse_duration(s).unwrap();
            assert_eq!(parse_duration(&format_duration(d)).unwrap(), d);
        }
        assert_eq!(format_duration(Duration::from_secs(90)), "1m30s");
    }
}
