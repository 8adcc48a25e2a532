//! Connections to the target: one per in-flight stream, reused by the next request once its
//! response is fully read (a small idle pool of [`Conn`]s), and opened ahead of a run with a
//! concurrency bound. No TLS (benchmark targets are plain http://).

use std::sync::Mutex;
use std::time::Duration;

use super::http::{Conn, ConnError};
use super::target::Target;

/// Idle connections ready for reuse.
#[derive(Default)]
pub(crate) struct Pool {
    idle: Mutex<Vec<Conn>>,
}

impl Pool {
    /// An idle connection the server has not closed meanwhile, or a new one (`fresh`).
    pub(crate) async fn get(&self, target: &Target) -> Result<(Conn, bool), ConnError> {
        loop {
            let conn = self.idle.lock().map_or(None, |mut idle| idle.pop());
            match conn {
                Some(c) if c.is_reusable() => return Ok((c, false)),
                Some(_) => continue,
                None => return Conn::dial(target).await.map(|c| (c, true)),
            }
        }
    }

    /// Open up to `n` connections ahead of the run (at most 64 dials at a time, for at most
    /// `within`), so the first wave of requests does not pay for its handshakes in the
    /// measured window. A failure here is not an error: each request dials again and records
    /// its own.
    pub(crate) async fn open_ahead(&self, target: &Target, n: usize, within: Duration) {
        use futures_util::StreamExt;
        let dials = futures_util::stream::iter(0..n)
            .map(|_| Conn::dial(target))
            .buffer_unordered(64)
            .take_while(|c| std::future::ready(c.is_ok()))
            .for_each(|c| {
                if let Ok(c) = c {
                    self.put(c);
                }
                std::future::ready(())
            });
        let _ = tokio::time::timeout(within, dials).await;
    }

    /// Give back a connection whose last response was read to the end.
    pub(crate) fn put(&self, conn: Conn) {
        if let Ok(mut idle) = self.idle.lock() {
            idle.push(conn);
        }
    }
}
