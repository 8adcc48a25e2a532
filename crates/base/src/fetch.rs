//! One HTTP layer for the cold paths: readiness probes, `/metrics` scrapes, the server's
//! `/tokenize`, and any other one-off request to a server. An [`Origin`] is parsed once from a
//! base URL (with `http::Uri`); each request is one HTTP/1.1 exchange on a fresh connection
//! with hyper's client, under a timeout, and the whole body is read as bytes (a caller decodes
//! UTF-8 once, on the whole body, never on a chunk).
//!
//! Not here: the streaming load path (client/http.rs), which keeps its own measured HTTP/1.1
//! code (docs/performance.md says why). No TLS: benchmark targets are plain `http://`.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::Method;
use hyper::http::uri::{Authority, Uri};
use hyper_util::rt::TokioIo;

/// Longest body read (16 MiB): a scrape, a probe or a tokenizer is far smaller, and a server
/// that sends without end must not fill memory until the timeout.
pub const MAX_BODY: usize = 16 << 20;

/// Why a request did not get a whole response.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error("{url} is not a usable base URL: {why}")]
    BadUrl { url: String, why: String },
    #[error("connect {addr}")]
    Connect {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{method} {url}")]
    Exchange {
        method: Method,
        url: String,
        #[source]
        source: hyper::Error,
    },
    #[error("{method} {url}: the answer is longer than {} MiB", MAX_BODY >> 20)]
    TooLong { method: Method, url: String },
    #[error("{method} {url}: no answer within {timeout:?}")]
    TimedOut {
        method: Method,
        url: String,
        timeout: Duration,
    },
}

/// Where a server answers: scheme `http`, host and port, and a path prefix (no trailing `/`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    authority: Authority,
    prefix: String,
}

impl Origin {
    /// Parse `http://host[:port][/prefix]`.
    pub fn parse(url: &str) -> Result<Self, FetchError> {
        let bad = |why: &str| FetchError::BadUrl {
            url: url.to_string(),
            why: why.to_string(),
        };
        let uri: Uri = url.parse().map_err(|e| bad(&format!("{e}")))?;
        if uri.scheme_str() != Some("http") {
            return Err(bad("only http:// is supported"));
        }
        let authority = uri.authority().cloned().ok_or_else(|| bad("no host"))?;
        if authority.host().is_empty() {
            return Err(bad("no host"));
        }
        if uri.query().is_some() {
            return Err(bad("a base URL has no query"));
        }
        Ok(Origin {
            authority,
            prefix: uri.path().trim_end_matches('/').to_string(),
        })
    }

    /// `host[:port]` as written (the `Host` header).
    pub fn authority(&self) -> &str {
        self.authority.as_str()
    }

    /// `host:port` to connect to (port 80 when none is written).
    pub fn socket_addr(&self) -> String {
        format!(
            "{}:{}",
            self.authority.host(),
            self.authority.port_u16().unwrap_or(80)
        )
    }

    /// The port as written, if any.
    pub fn port(&self) -> Option<u16> {
        self.authority.port_u16()
    }

    /// The path prefix of the base URL (`""` or `/something`, never ending in `/`).
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The same server with no path prefix.
    pub fn root(&self) -> Origin {
        Origin {
            authority: self.authority.clone(),
            prefix: String::new(),
        }
    }

    /// The full URL of `path` (which starts with `/`) under the prefix, for messages.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}{path}", self.authority, self.prefix)
    }
}

/// A whole response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    pub status: u16,
    pub body: Bytes,
}

impl Reply {
    /// The body as text, invalid UTF-8 replaced (for messages and line-oriented formats).
    pub fn text_lossy(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// `GET` `path` under `origin`'s prefix.
pub async fn get(origin: &Origin, path: &str, timeout: Duration) -> Result<Reply, FetchError> {
    request(origin, Method::GET, path, None, timeout).await
}

/// `POST` a JSON body to `path` under `origin`'s prefix.
pub async fn post_json(
    origin: &Origin,
    path: &str,
    body: &serde_json::Value,
    timeout: Duration,
) -> Result<Reply, FetchError> {
    request(
        origin,
        Method::POST,
        path,
        Some(Bytes::from(body.to_string())),
        timeout,
    )
    .await
}

async fn request(
    origin: &Origin,
    method: Method,
    path: &str,
    body: Option<Bytes>,
    timeout: Duration,
) -> Result<Reply, FetchError> {
    let url = origin.url(path);
    let exchange_err = |source| FetchError::Exchange {
        method: method.clone(),
        url: url.clone(),
        source,
    };
    let work = async {
        let addr = origin.socket_addr();
        let stream = tokio::net::TcpStream::connect(&addr)
            .await
            .map_err(|source| FetchError::Connect { addr, source })?;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(exchange_err)?;
        let driver = tokio::spawn(conn);
        let mut builder = hyper::Request::builder()
            .method(method.clone())
            .uri(format!("{}{path}", origin.prefix))
            .header(hyper::header::HOST, origin.authority());
        if body.is_some() {
            builder = builder.header(hyper::header::CONTENT_TYPE, "application/json");
        }
        let req = builder
            .body(Full::new(body.unwrap_or_default()))
            .map_err(|e| FetchError::BadUrl {
                url: url.clone(),
                why: e.to_string(),
            })?;
        let resp = sender.send_request(req).await.map_err(exchange_err)?;
        let status = resp.status().as_u16();
        let body = Limited::new(resp.into_body(), MAX_BODY).collect().await;
        // Also when the body was cut: the connection is not read any further.
        driver.abort();
        let body = body
            .map_err(|e| match e.downcast::<hyper::Error>() {
                Ok(e) => exchange_err(*e),
                Err(_) => FetchError::TooLong {
                    method: method.clone(),
                    url: url.clone(),
                },
            })?
            .to_bytes();
        Ok(Reply { status, body })
    };
    match tokio::time::timeout(timeout, work).await {
        Ok(result) => result,
        Err(_) => Err(FetchError::TimedOut {
            method,
            url,
            timeout,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[test]
    fn origins_parse_once() {
        let o = Origin::parse("http://example.org:8000/v1/").unwrap();
        assert_eq!(o.authority(), "example.org:8000");
        assert_eq!(o.socket_addr(), "example.org:8000");
        assert_eq!(o.prefix(), "/v1");
        assert_eq!(o.root().url("/metrics"), "http://example.org:8000/metrics");
        assert_eq!(
            Origin::parse("http://h").unwrap().socket_addr(),
            "h:80".to_string()
        );
        for bad in ["https://h:1", "h:1", "http://", "http://h:1/?q=1"] {
            assert!(
                matches!(Origin::parse(bad), Err(FetchError::BadUrl { .. })),
                "{bad}"
            );
        }
    }

    #[tokio::test]
    async fn a_chunked_body_arrives_whole_as_bytes() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let origin = Origin::parse(&format!("http://{}", listener.local_addr().unwrap())).unwrap();
        tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut buf = [0u8; 1024];
            let _ = s.read(&mut buf).await;
            // "é" is split across the two chunks.
            let reply = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\na\xc3\r\n2\r\n\xa9b\r\n0\r\n\r\n";
            s.write_all(reply).await.unwrap();
        });
        let reply = get(&origin, "/x", Duration::from_secs(5)).await.unwrap();
        assert_eq!(reply.status, 200);
        assert_eq!(std::str::from_utf8(&reply.body).unwrap(), "aéb");
    }
}
