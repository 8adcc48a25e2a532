//! Request records -> summary statistics, with vLLM's metric definitions (docs/metrics.md).
//! Pure: no I/O, no clock.
