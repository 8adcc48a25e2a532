//! Remote hosts at the command line: the hosts file loaded (a bad one is bad input, exit 2)
//! and the plan context `plan` and `validate` build with. The pool, pre-flight, providers
//! and locks are `fleet::hosts`'.

use std::path::Path;

use super::Failure;
pub(super) use crate::fleet::{Remote, plan_context};

/// `--hosts FILE`, else `./hosts.yaml` when present, else none; errors are bad input.
pub(super) fn load(path: Option<&Path>, accept_new_host_keys: bool) -> Result<Remote, Failure> {
    Remote::load(path, accept_new_host_keys).map_err(Failure::bad_input)
}
