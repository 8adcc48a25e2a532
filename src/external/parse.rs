//! Reading our metrics out of an external tool's output: JSON paths (`a.b[0].c`) into its
//! result JSON and regexes over its printed output. Pure; the runner hands it the output.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;

use super::{MetricRule, Source};

/// One step of a JSON path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum Step {
    Key(String),
    Index(usize),
}

/// A path into a JSON document: `a.b[0].c`, `results[2]`, `["odd key"]` is not supported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsonPath {
    text: String,
    steps: Vec<Step>,
}

impl Serialize for JsonPath {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.text)
    }
}

impl JsonPath {
    /// Parse `a.b[0].c`; the error says what is wrong.
    pub fn parse(text: &str) -> Result<JsonPath, String> {
        let mut steps = Vec::new();
        if text.trim().is_empty() {
            return Err("the JSON path is empty".into());
        }
        for part in text.split('.') {
            let (key, mut rest) = match part.find('[') {
                Some(i) => (&part[..i], &part[i..]),
                None => (part, ""),
            };
            if key.is_empty() && rest.is_empty() {
                return Err(format!(
                    "`{text}` has an empty key; write keys separated by `.`, indices as `[0]`"
                ));
            }
            if !key.is_empty() {
                steps.push(Step::Key(key.to_string()));
            }
            while !rest.is_empty() {
                let Some(close) = rest.find(']') else {
                    return Err(format!("`{text}` has a `[` without `]`"));
                };
                let index = rest[1..close].trim().parse::<usize>().map_err(|_| {
                    format!(
                        "`{text}`: `{}` is not an array index (a whole number)",
                        &rest[1..close]
                    )
                })?;
                steps.push(Step::Index(index));
                rest = &rest[close + 1..];
                if !rest.is_empty() && !rest.starts_with('[') {
                    return Err(format!("`{text}`: expected `.` or `[` after `]`"));
                }
            }
        }
        Ok(JsonPath {
            text: text.to_string(),
            steps,
        })
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The value at this path, if any.
    pub fn get<'a>(&self, root: &'a Value) -> Option<&'a Value> {
        let mut at = root;
        for step in &self.steps {
            at = match step {
                Step::Key(k) => at.get(k)?,
                Step::Index(i) => at.get(*i)?,
            };
        }
        Some(at)
    }
}

/// A value read for one metric and where it came from.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Extracted {
    pub value: f64,
    /// `json: a.b` or `regex: ...`.
    pub source: String,
    /// The text it was read from (the capture, or the JSON value).
    pub raw: String,
}

/// What parsing found.
#[derive(Debug, Clone, Default)]
pub struct ParseOutcome {
    pub values: BTreeMap<String, Extracted>,
    /// Required metrics not found, each with what was tried.
    pub missing: Vec<String>,
    /// The result JSON (result file, or stdout when it is JSON), kept in the summary.
    pub json: Option<Value>,
}

/// Apply `rules` to a command's output. `result` is the result file's text, if one was
/// named; without it stdout is tried as JSON. Errors only when a named result file is not
/// JSON.
pub fn extract(
    rules: &[MetricRule],
    stdout: &str,
    stderr: &str,
    result: Option<&str>,
) -> Result<ParseOutcome, String> {
    let json = match result {
        Some(text) => Some(
            serde_json::from_str::<Value>(text)
                .map_err(|e| format!("the result file is not JSON ({e})"))?,
        ),
        None => serde_json::from_str::<Value>(stdout.trim())
            .ok()
            .filter(|v| v.is_object() || v.is_array()),
    };
    let mut out = ParseOutcome {
        json,
        ..ParseOutcome::default()
    };
    for rule in rules {
        let found = rule
            .sources
            .iter()
            .find_map(|s| read(s, out.json.as_ref(), stdout, stderr));
        match found {
            Some(e) => {
                out.values.insert(rule.metric.clone(), e);
            }
            None if rule.required => {
                let tried: Vec<String> = rule.sources.iter().map(describe).collect();
                out.missing
                    .push(format!("`{}` (tried {})", rule.metric, tried.join("; ")));
            }
            None => {}
        }
    }
    Ok(out)
}

fn describe(source: &Source) -> String {
    match source {
        Source::Json(p) => format!("json `{}`", p.as_str()),
        Source::Regex(r) => format!("regex `{}`", r.as_str()),
    }
}

fn read(source: &Source, json: Option<&Value>, stdout: &str, stderr: &str) -> Option<Extracted> {
    match source {
        Source::Json(path) => {
            let v = path.get(json?)?;
            let value = match v {
                Value::Number(n) => n.as_f64()?,
                Value::String(s) => s.trim().parse::<f64>().ok()?,
                _ => return None,
            };
            value.is_finite().then(|| Extracted {
                value,
                source: describe(source),
                raw: v.to_string(),
            })
        }
        Source::Regex(re) => [stdout, stderr].into_iter().find_map(|text| {
            let caps = re.captures_iter(text).last()?;
            let raw = caps.get(1)?.as_str().trim().to_string();
            let value = raw.replace(',', "").parse::<f64>().ok()?;
            value.is_finite().then(|| Extracted {
                value,
                source: describe(source),
                raw,
            })
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(metric: &str, source: Source) -> MetricRule {
        MetricRule {
            metric: metric.into(),
            sources: vec![source],
            required: true,
        }
    }

    #[test]
    fn json_paths_walk_keys_and_indices() {
        let v: Value = serde_json::json!({"a": {"b": [{"c": 1.5}, {"c": "2.5"}]}});
        let p = JsonPath::parse("a.b[1].c").unwrap();
        assert_eq!(p.get(&v), Some(&Value::from("2.5")));
        assert_eq!(
            JsonPath::parse("a.b[0].c").unwrap().get(&v),
            Some(&Value::from(1.5))
        );
        assert_eq!(JsonPath::parse("a.x").unwrap().get(&v), None);
        assert_eq!(JsonPath::parse("a.b[0][1]").unwrap().steps.len(), 4);
    }

    #[test]
    fn bad_json_paths_say_what_is_wrong() {
        for (path, what) in [
            ("", "empty"),
            ("a..b", "empty key"),
            ("a[0", "without `]`"),
            ("a[x]", "not an array index"),
            ("a[0]b", "expected `.`"),
        ] {
            let e = JsonPath::parse(path).unwrap_err();
            assert!(e.contains(what), "{path}: {e}");
        }
    }

    #[test]
    fn the_last_regex_match_wins_and_stderr_is_searched_too() {
        let re = regex::Regex::new(r"tok/s: ([0-9.]+)").unwrap();
        let rules = [rule("output_throughput", Source::Regex(re.clone()))];
        let out = extract(&rules, "tok/s: 1\ntok/s: 2\n", "", None).unwrap();
        assert_eq!(out.values["output_throughput"].value, 2.0);
        assert_eq!(out.values["output_throughput"].raw, "2");
        let out = extract(&rules, "nothing", "tok/s: 3.5", None).unwrap();
        assert_eq!(out.values["output_throughput"].value, 3.5);
    }

    #[test]
    fn a_missing_required_metric_is_named_with_what_was_tried() {
        let re = regex::Regex::new(r"tok/s: ([0-9.]+)").unwrap();
        let rules = [
            rule("output_throughput", Source::Regex(re)),
            rule(
                "request_throughput",
                Source::Json(JsonPath::parse("rps").unwrap()),
            ),
        ];
        let out = extract(&rules, "{\"rps\": 4}", "", None).unwrap();
        assert_eq!(out.values["request_throughput"].value, 4.0);
        assert_eq!(out.missing.len(), 1);
        assert!(
            out.missing[0].contains("`output_throughput`"),
            "{:?}",
            out.missing
        );
        assert!(out.missing[0].contains("tok/s"), "{:?}", out.missing);
    }

    #[test]
    fn a_result_file_that_is_not_json_is_an_error() {
        let e = extract(&[], "", "", Some("Throughput: 1")).unwrap_err();
        assert!(e.contains("not JSON"), "{e}");
    }
}
