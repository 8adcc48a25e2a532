//! A point's load as the manifest's `load` field holds it ([`PointLoad`]): the
//! `plan::LoadPlan` this orchestrate planned, or the parts an imported result file said
//! ([`ImportedLoad`]); each is written as the very JSON it was before the field was typed.
//! Also the view of either that readers use ([`PlannedLoad`]: lengths, cap, rate, limit).

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use crate::dataset::DatasetSpec;
use crate::load::{Limit, LoadShape, RampUp, Rate};
use crate::plan::LoadPlan;

/// A point's load as planned. Read strictly: a load with `imported_from` is an
/// [`ImportedLoad`], any other a `plan::LoadPlan`, and a part that does not read is an error.
#[derive(Debug, Clone, PartialEq)]
pub enum PointLoad {
    /// The load this orchestrate planned and ran.
    Plan(Box<LoadPlan>),
    /// An imported run's load: what its result file said.
    Imported(Box<ImportedLoad>),
}

/// An imported run's load (`orchestrate import`): the backend the result file named and the
/// parts of the load it could be rebuilt from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ImportedLoad {
    /// The result file's `backend` (null when it named none).
    pub imported_from: Option<String>,
    /// Random input and output lengths, when the file (or the import's options) gave both.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dataset: Option<DatasetSpec>,
    pub shape: ImportedShape,
}

/// An imported load's shape, under `load::LoadShape`'s names.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ImportedShape {
    pub max_concurrency: Option<u32>,
    pub rate: Rate,
    pub ramp_up: Option<RampUp>,
    pub limit: Option<Limit>,
}

impl From<LoadPlan> for PointLoad {
    fn from(plan: LoadPlan) -> Self {
        Self::Plan(Box::new(plan))
    }
}

impl PointLoad {
    /// The plan, for a load this orchestrate planned.
    pub fn plan(&self) -> Option<&LoadPlan> {
        match self {
            Self::Plan(plan) => Some(plan),
            Self::Imported(_) => None,
        }
    }

    /// The load as readers use it.
    pub fn planned(&self) -> PlannedLoad {
        match self {
            Self::Plan(plan) => PlannedLoad::from(plan.as_ref()),
            Self::Imported(imported) => {
                let ImportedLoad { dataset, shape, .. } = imported.as_ref();
                let ImportedShape {
                    max_concurrency,
                    rate,
                    ramp_up,
                    limit,
                } = shape;
                PlannedLoad {
                    dataset: dataset.clone(),
                    shape: PlannedShape {
                        max_concurrency: *max_concurrency,
                        rate: Some(rate.clone()),
                        ramp_up: ramp_up.clone(),
                        limit: limit.clone(),
                    },
                }
            }
        }
    }
}

impl Serialize for PointLoad {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Plan(plan) => plan.serialize(s),
            Self::Imported(imported) => imported.serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for PointLoad {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let value = Value::deserialize(d)?;
        let Value::Object(object) = &value else {
            return Err(D::Error::custom(format!(
                "invalid type: {}, expected an object",
                kind(&value)
            )));
        };
        if object.contains_key("imported_from") {
            ImportedLoad::deserialize(value)
                .map(|i| Self::Imported(Box::new(i)))
                .map_err(D::Error::custom)
        } else {
            LoadPlan::deserialize(value)
                .map(Self::from)
                .map_err(D::Error::custom)
        }
    }
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// The parts of a point's planned load that readers use (lengths, request count, cap, rate),
/// under `plan::LoadPlan`'s names. A serialized `LoadPlan` has all of them; an imported run's
/// load has what its result file said; a part that is missing or unreadable is `None`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PlannedLoad {
    #[serde(default, deserialize_with = "lenient")]
    pub dataset: Option<DatasetSpec>,
    #[serde(default)]
    pub shape: PlannedShape,
}

/// `plan::LoadPlan`'s `shape` as readers see it (see [`PlannedLoad`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PlannedShape {
    #[serde(default, deserialize_with = "lenient")]
    pub max_concurrency: Option<u32>,
    #[serde(default, deserialize_with = "lenient")]
    pub rate: Option<Rate>,
    #[serde(default, deserialize_with = "lenient")]
    pub ramp_up: Option<RampUp>,
    #[serde(default, deserialize_with = "lenient")]
    pub limit: Option<Limit>,
}

fn lenient<'de, D: Deserializer<'de>, T: DeserializeOwned>(d: D) -> Result<Option<T>, D::Error> {
    Ok(serde_json::from_value(Value::deserialize(d)?).ok())
}

impl PlannedLoad {
    /// Read a point record's `load` (never fails: what is not there is `None`).
    pub fn from_json(value: &Value) -> Self {
        Self::deserialize(value).unwrap_or_default()
    }
}

impl From<&LoadPlan> for PlannedLoad {
    /// Destructured by name, so renaming one of these fields in `LoadPlan` or `LoadShape`
    /// breaks this build instead of the readers.
    fn from(plan: &LoadPlan) -> Self {
        let LoadPlan { dataset, shape, .. } = plan;
        let LoadShape {
            max_concurrency,
            rate,
            ramp_up,
            limit,
            ..
        } = shape;
        Self {
            dataset: Some(dataset.clone()),
            shape: PlannedShape {
                max_concurrency: *max_concurrency,
                rate: Some(rate.clone()),
                ramp_up: ramp_up.clone(),
                limit: Some(limit.clone()),
            },
        }
    }
}
