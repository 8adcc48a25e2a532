//! Sweep axes -> points: the cartesian product of the axes (first axis outermost), then
//! `exclude`, then `include`, with GitHub Actions' semantics:
//!
//! - an `exclude` entry removes every combination whose values match all of its keys;
//! - an `include` entry is added to every combination where it overwrites no *original*
//!   axis value (keys added by earlier includes may be overwritten); if it fits none, it
//!   becomes a combination of its own.
//!
//! Pure; knows nothing of templates or deployments.

use serde_json::{Map, Value};

/// One point of the sweep: axis values in declaration order (include-only keys last).
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    pub values: Vec<(String, Value)>,
}

impl Point {
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.values.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    fn set(&mut self, key: &str, value: Value) {
        match self.values.iter_mut().find(|(k, _)| k == key) {
            Some(slot) => slot.1 = value,
            None => self.values.push((key.to_string(), value)),
        }
    }

    /// `a=1,b=x`: the values as written, for ids and display.
    pub fn label(&self) -> String {
        self.values
            .iter()
            .map(|(k, v)| format!("{k}={}", scalar_text(v)))
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// A scalar's text without JSON quotes.
pub fn scalar_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Expand axes with include/exclude into points. No axes and no includes: one empty point.
pub fn expand(
    axes: &[(String, Vec<Value>)],
    include: &[Map<String, Value>],
    exclude: &[Map<String, Value>],
) -> Vec<Point> {
    let mut points = vec![Point { values: Vec::new() }];
    for (name, values) in axes {
        points = points
            .into_iter()
            .flat_map(|p| {
                values.iter().map(move |v| {
                    let mut p = p.clone();
                    p.values.push((name.clone(), v.clone()));
                    p
                })
            })
            .collect();
    }
    if axes.is_empty() && !include.is_empty() {
        points.clear();
    }
    points.retain(|p| {
        !exclude
            .iter()
            .any(|ex| ex.iter().all(|(k, v)| p.get(k) == Some(v)))
    });
    let original: Vec<Point> = points.clone();
    for inc in include {
        let mut fitted = false;
        for (p, orig) in points.iter_mut().zip(&original) {
            let overwrites_original = inc.iter().any(|(k, v)| orig.get(k).is_some_and(|o| o != v));
            if !overwrites_original && !original_is_empty(orig, axes) {
                for (k, v) in inc {
                    p.set(k, v.clone());
                }
                fitted = true;
            }
        }
        if !fitted {
            points.push(Point {
                values: inc.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            });
        }
    }
    points
}

fn original_is_empty(p: &Point, axes: &[(String, Vec<Value>)]) -> bool {
    !axes.is_empty() && p.values.is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn axes(v: Value) -> Vec<(String, Vec<Value>)> {
        v.as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.clone(), v.as_array().unwrap().clone()))
            .collect()
    }

    fn maps(v: Value) -> Vec<Map<String, Value>> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|m| m.as_object().unwrap().clone())
            .collect()
    }

    fn labels(points: &[Point]) -> Vec<String> {
        points.iter().map(Point::label).collect()
    }

    #[test]
    fn cartesian_product_first_axis_outermost() {
        let p = expand(
            &axes(json!({"image": ["a", "b"], "concurrency": [1, 2]})),
            &[],
            &[],
        );
        assert_eq!(
            labels(&p),
            [
                "image=a,concurrency=1",
                "image=a,concurrency=2",
                "image=b,concurrency=1",
                "image=b,concurrency=2"
            ]
        );
    }

    #[test]
    fn exclude_removes_partial_matches() {
        let p = expand(
            &axes(json!({"image": ["a", "b"], "concurrency": [1, 2]})),
            &[],
            &maps(json!([{"image": "b", "concurrency": 2}])),
        );
        assert_eq!(
            labels(&p),
            [
                "image=a,concurrency=1",
                "image=a,concurrency=2",
                "image=b,concurrency=1"
            ]
        );
        let p = expand(
            &axes(json!({"image": ["a", "b"], "concurrency": [1, 2]})),
            &[],
            &maps(json!([{"image": "a"}])),
        );
        assert_eq!(
            labels(&p),
            ["image=b,concurrency=1", "image=b,concurrency=2"]
        );
    }

    #[test]
    fn include_extends_matching_points_or_adds_a_new_one() {
        // Like GitHub's documented example: extend where no original value is overwritten.
        let p = expand(
            &axes(json!({"fruit": ["apple", "pear"], "animal": ["cat", "dog"]})),
            &maps(json!([
                {"color": "green"},
                {"color": "pink", "animal": "cat"},
                {"fruit": "apple", "shape": "circle"},
                {"fruit": "banana"},
                {"fruit": "banana", "animal": "cat"}
            ])),
            &[],
        );
        assert_eq!(
            labels(&p),
            [
                "fruit=apple,animal=cat,color=pink,shape=circle",
                "fruit=apple,animal=dog,color=green,shape=circle",
                "fruit=pear,animal=cat,color=pink",
                "fruit=pear,animal=dog,color=green",
                "fruit=banana",
                "fruit=banana,animal=cat",
            ]
        );
    }

    #[test]
    fn no_axes_gives_one_point_or_the_includes() {
        assert_eq!(expand(&[], &[], &[]).len(), 1);
        let p = expand(
            &[],
            &maps(
                json!([{"concurrency": 128, "output_len": 1600}, {"concurrency": 128, "output_len": 3200}]),
            ),
            &[],
        );
        assert_eq!(
            labels(&p),
            [
                "concurrency=128,output_len=1600",
                "concurrency=128,output_len=3200"
            ]
        );
    }
}
