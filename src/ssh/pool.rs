//! Connection reuse: one live session per host (and jump chain), reconnected when lost.

use std::collections::HashMap;

use tokio::sync::Mutex;

use super::{ConnectOptions, Session, SshError};
use crate::hosts::Host;

/// Sessions by host, shared by everything a run does on that host.
pub struct Pool {
    options: ConnectOptions,
    sessions: Mutex<HashMap<String, Session>>,
}

impl Pool {
    pub fn new(options: ConnectOptions) -> Self {
        Self {
            options,
            sessions: Mutex::new(HashMap::new()),
        }
    }

    /// The options sessions are opened with.
    pub fn options(&self) -> &ConnectOptions {
        &self.options
    }

    /// A live session to `host`: the cached one, or a new connection.
    pub async fn get(&self, host: &Host) -> Result<Session, SshError> {
        let key = host.describe();
        if let Some(session) = self.sessions.lock().await.get(&key)
            && session.is_alive()
        {
            return Ok(session.clone());
        }
        let session = Session::connect(host, &self.options).await?;
        self.sessions.lock().await.insert(key, session.clone());
        Ok(session)
    }

    /// Drop every cached session (each closes once nothing else holds it).
    pub async fn clear(&self) {
        self.sessions.lock().await.clear();
    }
}
