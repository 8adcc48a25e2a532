//! Readiness: declarative probes (HTTP, TCP, generate) under a deadline; fails at once when the instance exits.
