//! SSH against real sshd servers the tests start on loopback (`sshd`): sessions, tunnels,
//! the ssh provider, the host lock and pre-flight. Several sshd on 127.0.0.x stand for hosts.

mod external;
pub mod fixture;
mod host;
mod placement;
mod procs;
mod provider;
pub(crate) mod run;
mod session;
pub mod sshd;
mod telemetry;
mod tunnel;

use std::time::Duration;

use orchestrate::deploy::{GpuRequest, GpuVendor};
use orchestrate::provider::ssh::{Reach, SshProvider};
use orchestrate::provider::{LaunchRequest, Provider};
use orchestrate::shutdown::Shutdown;
use orchestrate::ssh::{
    CommandEvent, HostCheck, HostKeyPolicy, HostLock, LockWait, Pool, Session, SshError, preflight,
};

use fixture::connected;
use sshd::{Keys, Sshd, eventually, running};

/// A marker unique to this test and process, to find remote processes by command line.
pub fn marker(name: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!("orch-{name}-{}-{nanos}", std::process::id())
}

/// Trust `sshd` and connect to it with the test's user key.
pub async fn connect(sshd: &Sshd, keys: &Keys) -> Session {
    sshd.trust(keys);
    Session::connect(&sshd.host("h", keys), &keys.options(HostKeyPolicy::Strict))
        .await
        .unwrap()
}
