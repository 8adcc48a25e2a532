//! How the orchestrating machine reaches a server on a remote host (`client.reach`): directly
//! at the host's address and published port, through an SSH tunnel to where the server listens
//! on the host (its loopback or its own address, whichever accepts), or
//! `auto`: readiness probes go through a local relay that tries the direct address first and
//! the tunnel otherwise (a server may listen on the host's address only, or on its loopback
//! only), and once the instance is ready a TCP connect to the published address decides
//! (connects within [`DIRECT_PROBE_TIMEOUT`]: direct, else the tunnel). The choice is recorded
//! in the instance's facts (`reach`).
//!
//! Owns: the reach policy and [`Reaching`], a wrapper applying it to any remote provider's
//! instances (processes and Docker alike). Does not own: tunnels (`crate::ssh`).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::deploy::ReachMode;
use crate::fetch::Origin;
use async_trait::async_trait;

use super::{
    ExecOutput, ExecRequest, ExitInfo, Instance, LaunchRequest, LogSink, Provider, ProviderError,
};
use crate::ssh::{ForwardTarget, Session, Tunnel};

/// How long `auto` waits for a direct TCP connect before it takes the tunnel.
pub const DIRECT_PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// What an instance ended up using.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Chosen {
    Direct,
    Tunnel,
}

/// A provider on a remote host whose instances are reached according to a [`ReachMode`].
pub struct Reaching {
    inner: Arc<dyn Provider>,
    session: Session,
    mode: ReachMode,
    /// Tunnels lead to the instance's own address only, never the session host's loopback
    /// (instances on other machines than the session's host: Slurm nodes behind a login host).
    elsewhere: bool,
}

impl Reaching {
    pub fn new(inner: Arc<dyn Provider>, session: Session, mode: ReachMode) -> Self {
        Self {
            inner,
            session,
            mode,
            elsewhere: false,
        }
    }

    /// Instances that run on other machines than the session's host (reached from it at
    /// their own address): tunnels never try the host's loopback.
    pub fn elsewhere(mut self) -> Self {
        self.elsewhere = true;
        self
    }
}

#[async_trait]
impl Provider for Reaching {
    fn name(&self) -> String {
        self.inner.name()
    }

    async fn launch(&self, request: LaunchRequest) -> Result<Box<dyn Instance>, ProviderError> {
        let instance = self.inner.launch(request).await?;
        let direct = instance.base_url();
        if self.mode == ReachMode::Direct {
            return Ok(Box::new(ReachingInstance {
                inner: instance,
                direct,
                tunnel: None,
                relay: Mutex::new(None),
                chosen: Mutex::new(Some(Chosen::Direct)),
            }));
        }
        let origin = Origin::parse(&direct).ok();
        let Some((origin, port)) = origin.and_then(|o| o.port().map(|p| (o, p))) else {
            let _ = instance.stop().await;
            return Err(ProviderError::NoPort { url: direct });
        };
        let target = if self.elsewhere {
            ForwardTarget::Tcp {
                host: host_of(origin.authority()).to_string(),
                port,
            }
        } else {
            tunnel_target(host_of(origin.authority()), port)
        };
        let tunnel = match self.session.forward(target).await {
            Ok(t) => t,
            Err(e) => {
                let _ = instance.stop().await;
                return Err(ProviderError::Ssh {
                    action: format!("open a tunnel to port {port}"),
                    host: self.session.host().name.clone(),
                    source: Box::new(e),
                });
            }
        };
        let (chosen, relay) = match self.mode {
            ReachMode::Tunnel => (Some(Chosen::Tunnel), None),
            _ => match Relay::start(origin.socket_addr(), tunnel.local_addr()).await {
                Ok(relay) => (None, Some(relay)),
                Err(e) => {
                    let _ = instance.stop().await;
                    return Err(ProviderError::Relay(e));
                }
            },
        };
        Ok(Box::new(ReachingInstance {
            inner: instance,
            direct,
            tunnel: Some(tunnel),
            relay: Mutex::new(relay),
            chosen: Mutex::new(chosen),
        }))
    }

    async fn host_facts(&self) -> serde_json::Value {
        self.inner.host_facts().await
    }
}

/// Where a tunnel to a server on `port` of the host at `address` leads: the address the
/// server listens on, as seen from the host (its loopback, else its own address; the first
/// that accepts, the last that accepted tried first).
pub fn tunnel_target(address: &str, port: u16) -> ForwardTarget {
    let mut hosts = vec!["127.0.0.1".to_string()];
    if !address.is_empty() && address != "127.0.0.1" && address != "localhost" {
        hosts.push(address.to_string());
    }
    ForwardTarget::TcpFirst { hosts, port }
}

/// The host part of `host:port` (`[v6]:port` gives `v6`).
fn host_of(authority: &str) -> &str {
    let host = authority
        .rsplit_once(':')
        .map_or(authority, |(host, _)| host);
    host.trim_start_matches('[').trim_end_matches(']')
}

/// Does `url`'s address accept a TCP connection within `timeout`?
pub async fn connects(url: &str, timeout: Duration) -> bool {
    let Ok(origin) = Origin::parse(url) else {
        return false;
    };
    matches!(
        tokio::time::timeout(
            timeout,
            tokio::net::TcpStream::connect(origin.socket_addr())
        )
        .await,
        Ok(Ok(_))
    )
}

/// Until `auto` decides: a local listener whose connections go to the direct address when it
/// connects within [`DIRECT_PROBE_TIMEOUT`], else through the tunnel.
struct Relay {
    addr: SocketAddr,
    accept: tokio::task::JoinHandle<()>,
}

impl Relay {
    async fn start(direct: String, tunnel: SocketAddr) -> std::io::Result<Relay> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let accept = tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                let direct = direct.clone();
                tokio::spawn(async move {
                    let connect = tokio::net::TcpStream::connect(direct.as_str());
                    let outbound = match tokio::time::timeout(DIRECT_PROBE_TIMEOUT, connect).await {
                        Ok(Ok(stream)) => Ok(stream),
                        _ => tokio::net::TcpStream::connect(tunnel).await,
                    };
                    // Neither answers: the connection closes at once (not listening yet).
                    if let Ok(mut outbound) = outbound {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
            }
        });
        Ok(Relay { addr, accept })
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// An instance reached directly or through its tunnel.
struct ReachingInstance {
    inner: Box<dyn Instance>,
    /// The inner provider's URL (host address and published port).
    direct: String,
    tunnel: Option<Tunnel>,
    /// `auto` before it has decided.
    relay: Mutex<Option<Relay>>,
    /// `None` until `auto` has decided (the relay is used meanwhile).
    chosen: Mutex<Option<Chosen>>,
}

impl ReachingInstance {
    fn chosen(&self) -> Option<Chosen> {
        *self.chosen.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn tunnel_url(&self) -> Option<String> {
        let tunnel = self.tunnel.as_ref()?;
        let path = authority_suffix(&self.direct);
        Some(format!("http://{}{path}", tunnel.local_addr()))
    }
}

/// The path part after the authority (`""` for `http://h:1`).
fn authority_suffix(url: &str) -> String {
    Origin::parse(url).map_or_else(|_| String::new(), |o| o.prefix().to_string())
}

#[async_trait]
impl Instance for ReachingInstance {
    fn describe(&self) -> String {
        self.inner.describe()
    }

    fn peer_url(&self) -> String {
        self.direct.clone()
    }

    fn base_url(&self) -> String {
        let relay = self
            .relay
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .map(|r| format!("http://{}{}", r.addr, authority_suffix(&self.direct)));
        match (self.chosen(), relay, self.tunnel_url()) {
            (Some(Chosen::Direct), _, _) | (_, _, None) => self.direct.clone(),
            (None, Some(relay), _) => relay,
            (_, _, Some(tunnel)) => tunnel,
        }
    }

    fn log(&self) -> &LogSink {
        self.inner.log()
    }

    async fn exited(&self) -> ExitInfo {
        self.inner.exited().await
    }

    fn exit_watch(&self) -> Option<crate::provider::ExitWatch> {
        self.inner.exit_watch()
    }

    async fn ready(&self) {
        self.inner.ready().await;
        if self.chosen().is_some() {
            return;
        }
        let chosen = if connects(&self.direct, DIRECT_PROBE_TIMEOUT).await {
            Chosen::Direct
        } else {
            Chosen::Tunnel
        };
        *self.chosen.lock().unwrap_or_else(|p| p.into_inner()) = Some(chosen);
        self.relay.lock().unwrap_or_else(|p| p.into_inner()).take();
    }

    fn facts(&self) -> serde_json::Value {
        let mut facts = self.inner.facts();
        let reach = match self.chosen() {
            Some(Chosen::Direct) => "direct",
            Some(Chosen::Tunnel) => "tunnel",
            None => "undecided",
        };
        if let Some(map) = facts.as_object_mut() {
            map.insert("reach".into(), reach.into());
            map.insert("direct_url".into(), self.direct.clone().into());
            map.insert("base_url".into(), self.base_url().into());
        }
        facts
    }

    async fn stop(self: Box<Self>) -> Result<(), ProviderError> {
        // The tunnel closes after the instance has stopped.
        let ReachingInstance {
            inner,
            tunnel,
            relay,
            ..
        } = *self;
        drop(relay);
        let stopped = inner.stop().await;
        drop(tunnel);
        stopped
    }

    async fn exec(&self, request: ExecRequest) -> Result<ExecOutput, ProviderError> {
        self.inner.exec(request).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_split_into_authority_port_and_path() {
        let o = Origin::parse("http://h:8000/v1").unwrap();
        assert_eq!((o.socket_addr().as_str(), o.port()), ("h:8000", Some(8000)));
        assert_eq!(Origin::parse("http://h").unwrap().port(), None);
        assert_eq!(authority_suffix("http://h:8000/v1"), "/v1");
        assert_eq!(authority_suffix("http://h:8000"), "");
    }

    #[tokio::test]
    async fn a_listening_port_connects_and_a_closed_one_does_not() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        assert!(connects(&url, Duration::from_secs(2)).await);
        drop(listener);
        assert!(!connects(&url, Duration::from_secs(2)).await);
    }

    #[test]
    fn the_tunnel_tries_the_loopback_then_the_host_address() {
        assert_eq!(
            tunnel_target("10.0.0.5", 8000),
            ForwardTarget::TcpFirst {
                hosts: vec!["127.0.0.1".into(), "10.0.0.5".into()],
                port: 8000
            }
        );
        assert_eq!(
            tunnel_target(host_of("127.0.0.1:9"), 9),
            ForwardTarget::TcpFirst {
                hosts: vec!["127.0.0.1".into()],
                port: 9
            }
        );
        // Once the host address accepted, it is tried first.
        let mut target = tunnel_target("10.0.0.5", 8000);
        target.prefer(1);
        assert_eq!(
            target,
            ForwardTarget::TcpFirst {
                hosts: vec!["10.0.0.5".into(), "127.0.0.1".into()],
                port: 8000
            }
        );
        assert_eq!(target.to_string(), "10.0.0.5:8000 or 127.0.0.1:8000");
        assert_eq!(host_of("[::1]:80"), "::1");
        assert_eq!(host_of("h2:80"), "h2");
    }

    #[test]
    fn reach_defaults_to_auto_and_reads_lowercase() {
        assert_eq!(ReachMode::default(), ReachMode::Auto);
        let m: ReachMode = serde_json::from_str("\"tunnel\"").unwrap();
        assert_eq!(m, ReachMode::Tunnel);
    }
}
