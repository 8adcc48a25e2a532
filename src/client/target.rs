//! Where requests go: the target's address, host, path and credentials, parsed and resolved
//! once before a run.

use std::net::SocketAddr;
use std::time::Duration;

use hyper::header::HeaderValue;

use super::ClientError;
use crate::fetch::{FetchError, Origin};

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
