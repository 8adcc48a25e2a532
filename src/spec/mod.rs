//! The task file: types that mirror the YAML, loading with file:line:col errors, the
//! profile merge and the leaf values (durations, sizes, GPUs, env).

pub mod diagnostic;
pub mod dstack;
pub mod load;
pub mod profile;
pub mod resources;
mod scalar;
pub mod types;
pub mod values;

pub use diagnostic::{Diagnostic, SpecError};
pub use load::{Source, TASK_SOURCE, Task, load, load_str, load_str_with, load_with};
pub use types::*;
