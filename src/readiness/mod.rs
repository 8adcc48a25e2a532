//! Readiness: is a freshly started server able to answer? Declarative probes (HTTP status on a
//! path, or a TCP connect, then optionally one tiny completion) retried under a deadline.
//! Fails at once, with the instance's last log lines, when the instance exits while starting,
//! and never passes for an instance that has exited (whatever answers on its port).
//! Then, once every role of a deployment is ready, topology readiness ([`workers`]): a router
//! reports the prefill/decode workers it was given, and one generation passes through it.
//! Owns the probes; does not start or stop anything.
//!
//! Layout: [`server`] waits for one server, through [`probe`]; [`excerpt`] cuts what a server
//! said down for errors; [`workers`] and [`ray`] are the topology and Ray-gang waits;
//! [`register`] adds workers to a router as dstack does.

mod excerpt;
mod probe;
pub mod ray;
pub mod register;
mod server;
pub mod workers;

pub use excerpt::{TAIL_LINES, tail_text};
pub use probe::{GenerateProbe, ModelsError, healthy, served_model};
pub use server::{ReadinessError, wait};
