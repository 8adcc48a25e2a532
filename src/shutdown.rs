//! Signals become cancellation, in one place. The first Ctrl-C or SIGTERM cancels the token
//! that every long-running piece receives (teardown then runs normally); a second one runs
//! every registered emergency kill at once and exits with 130.
//!
//! Nothing here is global: `Shutdown` is created by the verb and passed in.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio_util::sync::CancellationToken;

type KillHook = Box<dyn Fn() + Send + Sync>;

/// The cancellation token plus the registry of emergency kills.
#[derive(Clone)]
pub struct Shutdown {
    token: CancellationToken,
    hooks: Arc<Mutex<BTreeMap<u64, (String, KillHook)>>>,
    next: Arc<AtomicU64>,
}

impl Default for Shutdown {
    fn default() -> Self {
        Self::new()
    }
}

impl Shutdown {
    pub fn new() -> Self {
        Self {
            token: CancellationToken::new(),
            hooks: Arc::default(),
            next: Arc::default(),
        }
    }

    /// Cancelled on the first Ctrl-C / SIGTERM (or by `cancel`).
    pub fn token(&self) -> CancellationToken {
        self.token.clone()
    }

    /// Cancel everything, as a first Ctrl-C would.
    pub fn cancel(&self) {
        self.token.cancel();
    }

    /// Register a synchronous, best-effort kill for something that is running. The returned
    /// guard unregisters it when dropped (after a normal teardown).
    pub fn register(
        &self,
        what: impl Into<String>,
        kill: impl Fn() + Send + Sync + 'static,
    ) -> KillRegistration {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.hooks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, (what.into(), Box::new(kill)));
        KillRegistration {
            id,
            hooks: Arc::downgrade(&self.hooks),
        }
    }

    /// Run every registered kill now (forced exit path).
    pub fn kill_all(&self) {
        let hooks = std::mem::take(&mut *self.hooks.lock().unwrap_or_else(|p| p.into_inner()));
        for (_, (what, kill)) in hooks {
            tracing::warn!("forced exit: killing {what}");
            kill();
        }
    }

    /// Number of registered kills (what is still running).
    pub fn live(&self) -> usize {
        self.hooks.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Turn SIGINT and SIGTERM into this shutdown: the first cancels, the second kills all
    /// registered things and exits with 130. Must be called inside a tokio runtime.
    pub fn listen_for_signals(&self) {
        let this = self.clone();
        tokio::spawn(async move {
            use tokio::signal::unix::{SignalKind, signal};
            let (Ok(mut int), Ok(mut term)) = (
                signal(SignalKind::interrupt()),
                signal(SignalKind::terminate()),
            ) else {
                tracing::warn!(
                    "could not install signal handlers; Ctrl-C will not tear down cleanly"
                );
                return;
            };
            let mut seen = 0;
            loop {
                tokio::select! {
                    _ = int.recv() => {},
                    _ = term.recv() => {},
                }
                seen += 1;
                if seen == 1 {
                    tracing::warn!("interrupted: tearing down (press Ctrl-C again to force)");
                    this.cancel();
                } else {
                    this.kill_all();
                    std::process::exit(130);
                }
            }
        });
    }
}

/// Unregisters an emergency kill when dropped.
pub struct KillRegistration {
    id: u64,
    hooks: std::sync::Weak<Mutex<BTreeMap<u64, (String, KillHook)>>>,
}

impl Drop for KillRegistration {
    fn drop(&mut self) {
        if let Some(hooks) = self.hooks.upgrade() {
            hooks
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&self.id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    #[test]
    fn kills_run_once_and_registrations_unregister() {
        let shutdown = Shutdown::new();
        let killed = Arc::new(AtomicUsize::new(0));
        let k = killed.clone();
        let kept = shutdown.register("a", move || {
            k.fetch_add(1, Ordering::SeqCst);
        });
        let k = killed.clone();
        let dropped = shutdown.register("b", move || {
            k.fetch_add(10, Ordering::SeqCst);
        });
        drop(dropped);
        assert_eq!(shutdown.live(), 1);
        shutdown.kill_all();
        shutdown.kill_all();
        assert_eq!(killed.load(Ordering::SeqCst), 1);
        drop(kept);
        assert_eq!(shutdown.live(), 0);
    }
}
