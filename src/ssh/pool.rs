//! Connection reuse: live sessions per host (and jump chain), reconnected when lost. A host
//! gets another connection when its sessions already carry `max_commands` open commands, so
//! sshd's per-connection `MaxSessions` (default 10) never refuses an 8-GPU host's instances.

use std::collections::HashMap;

use tokio::sync::Mutex;

use super::{ConnectOptions, Session, SshError};
use crate::hosts::Host;

/// Open commands per connection before the pool opens another one (below sshd's default 10,
/// leaving room for short commands racing in).
pub(super) const DEFAULT_MAX_COMMANDS: usize = 8;

/// Sessions by host, shared by everything a run does on that host.
pub struct Pool {
    options: ConnectOptions,
    max_commands: usize,
    sessions: Mutex<HashMap<String, Vec<Session>>>,
}

impl Pool {
    pub fn new(options: ConnectOptions) -> Self {
        Self {
            options,
            max_commands: DEFAULT_MAX_COMMANDS,
            sessions: Mutex::new(HashMap::new()),
        }
    }

    /// Open another connection once a session carries this many commands.
    pub fn with_max_commands(mut self, max_commands: usize) -> Self {
        self.max_commands = max_commands.max(1);
        self
    }

    /// The options sessions are opened with.
    pub fn options(&self) -> &ConnectOptions {
        &self.options
    }

    /// A live session to `host` with room for another command: a cached one, or a new
    /// connection.
    pub async fn get(&self, host: &Host) -> Result<Session, SshError> {
        let key = host.describe();
        {
            let mut sessions = self.sessions.lock().await;
            let list = sessions.entry(key.clone()).or_default();
            list.retain(Session::is_alive);
            if let Some(session) = list
                .iter()
                .min_by_key(|s| s.open_commands())
                .filter(|s| s.open_commands() < self.max_commands)
            {
                return Ok(session.clone());
            }
        }
        let session = Session::connect(host, &self.options).await?;
        self.sessions
            .lock()
            .await
            .entry(key)
            .or_default()
            .push(session.clone());
        Ok(session)
    }

    /// Live connections to `host` held by the pool.
    pub async fn connections(&self, host: &Host) -> usize {
        let sessions = self.sessions.lock().await;
        sessions
            .get(&host.describe())
            .map_or(0, |list| list.iter().filter(|s| s.is_alive()).count())
    }

    /// Drop every cached session (each closes once nothing else holds it).
    pub async fn clear(&self) {
        self.sessions.lock().await.clear();
    }
}
