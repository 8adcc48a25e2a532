//! The task file: types that mirror the YAML, loading with file:line:col errors, validation.
