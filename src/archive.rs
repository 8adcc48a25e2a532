//! The results archive: results/<task>/<run-id>/ written as the run goes; versioned format.
