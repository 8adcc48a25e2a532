//! Reaching a pod through the API server (`client.reach: tunnel` on a Kubernetes cluster, for
//! an orchestrate that cannot reach pod IPs): a listener on this machine's loopback whose
//! every accepted connection becomes one port-forward stream to the pod's port (kube's
//! `portforward`: a WebSocket to the API server, which relays it through the kubelet).
//! Each client connection costs a WebSocket and a stream on the API server; at thousands of
//! streams that is what limits the load (docs/kubernetes.md has the measurement).
//!
//! Owns: the listener and its relays, ended when the [`PortForward`] is dropped.

use std::net::SocketAddr;

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// A local port forwarded to a pod's port; dropping it closes the listener and every relay.
pub(crate) struct PortForward {
    local: SocketAddr,
    cancel: CancellationToken,
    task: JoinHandle<()>,
}

impl PortForward {
    /// Listen on `127.0.0.1:0` and forward each connection to `port` of pod `name`.
    pub(crate) async fn start(pods: Api<Pod>, name: String, port: u16) -> std::io::Result<Self> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let local = listener.local_addr()?;
        let cancel = CancellationToken::new();
        let stop = cancel.clone();
        let task = tokio::spawn(async move {
            loop {
                let accepted = tokio::select! {
                    a = listener.accept() => a,
                    () = stop.cancelled() => return,
                };
                let conn = match accepted {
                    Ok((conn, _)) => conn,
                    Err(e) => {
                        tracing::debug!("port-forward to pod {name}: accept: {e}");
                        continue;
                    }
                };
                let (pods, name, stop) = (pods.clone(), name.clone(), stop.clone());
                tokio::spawn(async move {
                    tokio::select! {
                        r = relay(&pods, &name, port, conn) => {
                            if let Err(e) = r {
                                tracing::debug!("port-forward to pod {name}:{port}: {e}");
                            }
                        }
                        () = stop.cancelled() => {}
                    }
                });
            }
        });
        Ok(Self {
            local,
            cancel,
            task,
        })
    }

    /// The local address that reaches the pod's port.
    pub(crate) fn local_addr(&self) -> SocketAddr {
        self.local
    }
}

impl Drop for PortForward {
    fn drop(&mut self) {
        self.cancel.cancel();
        self.task.abort();
    }
}

/// Carry one local connection over a port-forward stream to `port` of pod `name`, both ways,
/// until either side closes.
async fn relay(pods: &Api<Pod>, name: &str, port: u16, mut conn: TcpStream) -> Result<(), String> {
    let mut forwarder = pods
        .portforward(name, &[port])
        .await
        .map_err(|e| format!("open: {e}"))?;
    let mut upstream = forwarder
        .take_stream(port)
        .ok_or_else(|| "the API server gave no stream".to_string())?;
    let copied = tokio::io::copy_bidirectional(&mut conn, &mut upstream).await;
    drop(upstream);
    forwarder.abort();
    copied.map(|_| ()).map_err(|e| format!("relay: {e}"))
}
