//! Types that mirror the task file one to one. Every struct denies unknown keys and every
//! field has a doc comment: docs/task-file.md is checked against them. Values that may hold
//! templates stay as written (`Scalar`, `String`); the plan resolves them.
//!
//! Owns: the YAML shape. Does not own: loading/errors (load), resolution (plan).
//!
//! Layout: [`task`] is the whole file; it holds [`deployment`]s (roles, wiring, hardware),
//! their [`readiness`], the [`benchmark`] section with its [`matrix`], and
//! [`dstack_values`] and [`dstack_groups`], the value forms only dstack files write.

mod benchmark;
mod deployment;
pub(super) mod dstack_groups;
pub(super) mod dstack_values;
mod matrix;
mod readiness;
mod task;
mod telemetry;

pub use benchmark::{
    BenchmarkSpec, CheckSpec, DatasetKind, DatasetSpecYaml, ExternalSpec, MetricSourceSpec,
    RampUpSpec, SearchYaml, TurnsYaml, ValiditySpec,
};
pub use deployment::{
    ClientSpec, ContainerSpec, DeploymentSpec, DeploymentsSpec, ResourcesSpec, RoleSpec, RolesSpec,
};
pub use matrix::{AxisSpec, MatrixSpec};
pub use readiness::{RaySpec, ReadinessSpec, WorkersSpec, WorkersVia};
pub use task::TaskSpec;
pub use telemetry::{GpuTool, TelemetrySpec};
