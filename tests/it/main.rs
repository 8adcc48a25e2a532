//! The one integration-test binary. Each module states what it covers; end-to-end tests
//! start real servers on port 0 and drive the built `orchestrate` binary.

mod archive_types;
mod bench;
mod client;
mod common;
mod conformance;
mod damaged;
mod diskfull;
mod docker;
mod dstack;
mod dstack_forms;
mod dynamo;
mod exits;
mod external;
mod faults;
mod fuzz;
mod gang;
mod layers;
mod missing_files;
mod mock;
mod nightly;
mod procs;
mod ray;
mod report;
mod repro;
mod routers;
mod run;
mod seeds;
mod seeds_topology;
mod silent;
mod slurm;
mod slurm_faults;
mod spec;
pub mod ssh;
mod topology;
mod topology_faults;
