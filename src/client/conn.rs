//! Connections to the target: one per in-flight stream, reused by the next request once its
//! response is fully read (a small idle pool of [`http::Conn`]s), and opened ahead of a run
//! with a concurrency bound. No TLS (benchmark targets are plain http://).

use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::Duration;

use hyper::header::HeaderValue;

use super::ClientError;
pub(crate) use super::http::Conn;
use super::http::stall_of;
use super::record::RequestOutcome;
use crate::fetch::{FetchError, Origin};
use crate::units::error_chain;

/// Why a connection gave no response. The exchange decides on the variant whether a fresh
/// connection is worth one more try ([`ConnError::stale`]); records keep the text.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ConnError {
    #[error("connect {addr}")]
    Connect {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("sending the request")]
    Send(#[source] std::io::Error),
    #[error("reading the response")]
    Read(#[source] std::io::Error),
    #[error("the server closed the connection without a response")]
    ClosedBeforeResponse,
    #[error("the server closed the connection in the response head")]
    ClosedInHead,
    #[error("the response head is longer than {max} bytes")]
    HeadTooLong { max: usize },
    /// The head is not HTTP/1.x as this client reads it (the reason, as text).
    #[error("{0}")]
    BadHead(String),
}

impl ConnError {
    /// A kept-alive connection the server closed meanwhile: nothing was received, so a fresh
    /// connection may succeed and nothing is lost by trying one. (A server that took nothing
    /// for the stall timeout is not stale: it is silent.)
    pub(crate) fn stale(&self) -> bool {
        match self {
            ConnError::Send(e) => stall_of(e).is_none(),
            ConnError::ClosedBeforeResponse => true,
            _ => false,
        }
    }

    /// The stall timeout, when that is what ended the connection.
    pub(crate) fn stalled(&self) -> Option<Duration> {
        match self {
            ConnError::Connect { source, .. }
            | ConnError::Send(source)
            | ConnError::Read(source) => stall_of(source),
            _ => None,
        }
    }

    /// The outcome of a request that got no response because of this.
    pub(crate) fn outcome(&self) -> RequestOutcome {
        match self.stalled() {
            Some(d) => RequestOutcome::stalled(d),
            None => RequestOutcome::ConnectFailed {
                message: error_chain(self),
            },
        }
    }
}

/// Where requests go.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    pub addr: SocketAddr,
    pub host: HeaderValue,
    pub path: String,
    pub authorization: Option<HeaderValue>,
    /// The server's root, for the cold-path requests (`/metrics` scrapes).
    pub origin: Origin,
    /// No byte for this long ends a request as stalled (`None`: never).
    pub stall: Option<Duration>,
}

impl Target {
    /// Parse `http://host:port[/prefix]` (once, with the cold-path layer's [`Origin`]) and
    /// resolve it once.
    pub(crate) async fn resolve(
        base_url: &str,
        path: &str,
        api_key: Option<&str>,
        stall: Option<Duration>,
    ) -> Result<Self, ClientError> {
        let bad = |why: &str| ClientError::BadUrl {
            url: base_url.to_string(),
            why: why.to_string(),
        };
        let origin = Origin::parse(base_url).map_err(|e| match e {
            FetchError::BadUrl { why, .. } => bad(&why),
            other => bad(&other.to_string()),
        })?;
        let prefix = origin.prefix();
        let with_port = origin.socket_addr();
        let addr = tokio::net::lookup_host(&with_port)
            .await
            .map_err(|e| bad(&format!("cannot resolve {with_port}: {e}")))?
            .next()
            .ok_or_else(|| bad("the host resolves to no address"))?;
        // A prefix ending in /v1 plus a /v1/... path must not double the /v1.
        let path = if prefix.ends_with("/v1") && path.starts_with("/v1/") {
            format!("{prefix}{}", &path[3..])
        } else {
            format!("{prefix}{path}")
        };
        let authorization = api_key
            .map(|k| HeaderValue::from_str(&format!("Bearer {k}")))
            .transpose()
            .map_err(|_| bad("the API key is not a valid header value"))?;
        Ok(Target {
            addr,
            host: HeaderValue::from_str(origin.authority()).map_err(|_| bad("bad host"))?,
            path,
            authorization,
            origin: origin.root(),
            stall,
        })
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_connection_closed_before_any_response_is_stale() {
        let io = || std::io::Error::from(std::io::ErrorKind::BrokenPipe);
        assert!(ConnError::ClosedBeforeResponse.stale());
        assert!(ConnError::Send(io()).stale());
        assert!(!ConnError::ClosedInHead.stale());
        assert!(!ConnError::Read(io()).stale());
        assert!(!ConnError::BadHead("x".into()).stale());
        assert_eq!(
            error_chain(&ConnError::Read(std::io::Error::other("reset"))),
            "reading the response: reset"
        );
    }
}
