//! minijinja with strict undefined, rendered on string fields after YAML parsing.
