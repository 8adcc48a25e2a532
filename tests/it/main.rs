//! The one integration-test binary. Each module states what it covers; end-to-end tests
//! start real servers on port 0 and drive the built `orchestrate` binary.

mod bench;
mod client;
mod common;
mod conformance;
mod docker;
mod exits;
mod external;
mod gang;
mod layers;
mod mock;
mod nightly;
mod procs;
mod report;
mod routers;
mod run;
mod seeds_topology;
mod spec;
pub mod ssh;
mod topology;
