//! The subset of `~/.ssh/config` the hosts file honours: `Host` blocks with `HostName`, `User`,
//! `Port`, `IdentityFile` and `ProxyJump`. As in OpenSSH, the first value found for a keyword
//! wins, `Host` patterns may use `*`, `?` and `!negation`, and `Match` blocks are skipped
//! (their options are not applied; said here rather than guessed).

use std::path::{Path, PathBuf};

/// Parsed `Host` blocks, in file order.
#[derive(Debug, Clone, Default)]
pub struct SshConfig {
    blocks: Vec<Block>,
}

#[derive(Debug, Clone)]
struct Block {
    /// `None` for a `Match` block (ignored).
    patterns: Option<Vec<String>>,
    options: Vec<(String, String)>,
}

/// What the SSH config says about one alias.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SshConfigEntry {
    pub host_name: Option<String>,
    pub user: Option<String>,
    pub port: Option<u16>,
    pub identity_files: Vec<String>,
    pub proxy_jump: Option<String>,
}

impl SshConfig {
    /// `~/.ssh/config`, or an empty config when it does not exist or cannot be read.
    pub fn user_default() -> Self {
        match home_dir() {
            Some(home) => Self::read(&home.join(".ssh/config")).unwrap_or_default(),
            None => Self::default(),
        }
    }

    /// Read and parse a config file.
    pub fn read(path: &Path) -> std::io::Result<Self> {
        Ok(Self::parse(&std::fs::read_to_string(path)?))
    }

    /// Parse config text.
    pub fn parse(text: &str) -> Self {
        let mut blocks = vec![Block {
            patterns: Some(vec!["*".to_string()]),
            options: Vec::new(),
        }];
        for raw in text.lines() {
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (key, value) = match line.split_once(|c: char| c.is_whitespace() || c == '=') {
                Some((k, v)) => (
                    k,
                    v.trim_start_matches(|c: char| c.is_whitespace() || c == '='),
                ),
                None => (line, ""),
            };
            let key = key.to_ascii_lowercase();
            let value = value.trim().trim_matches('"').to_string();
            match key.as_str() {
                "host" => blocks.push(Block {
                    patterns: Some(value.split_whitespace().map(str::to_string).collect()),
                    options: Vec::new(),
                }),
                "match" => blocks.push(Block {
                    patterns: None,
                    options: Vec::new(),
                }),
                _ => {
                    if let Some(block) = blocks.last_mut() {
                        block.options.push((key, value));
                    }
                }
            }
        }
        Self { blocks }
    }

    /// The options that apply to `alias` (first value wins; identity files accumulate).
    pub fn lookup(&self, alias: &str) -> SshConfigEntry {
        let mut entry = SshConfigEntry::default();
        for block in &self.blocks {
            let Some(patterns) = &block.patterns else {
                continue;
            };
            if !matches_patterns(patterns, alias) {
                continue;
            }
            for (key, value) in &block.options {
                match key.as_str() {
                    "hostname" if entry.host_name.is_none() => {
                        entry.host_name = Some(value.replace("%h", alias));
                    }
                    "user" if entry.user.is_none() => entry.user = Some(value.clone()),
                    "port" if entry.port.is_none() => entry.port = value.parse().ok(),
                    "identityfile" => entry.identity_files.push(value.clone()),
                    "proxyjump" if entry.proxy_jump.is_none() && value != "none" => {
                        entry.proxy_jump = Some(value.clone());
                    }
                    _ => {}
                }
            }
        }
        entry
    }
}

fn matches_patterns(patterns: &[String], name: &str) -> bool {
    let mut matched = false;
    for pattern in patterns {
        if let Some(negated) = pattern.strip_prefix('!') {
            if glob(negated.as_bytes(), name.as_bytes()) {
                return false;
            }
        } else if glob(pattern.as_bytes(), name.as_bytes()) {
            matched = true;
        }
    }
    matched
}

/// `*` and `?` wildcard match, as in ssh_config patterns.
fn glob(pattern: &[u8], text: &[u8]) -> bool {
    match (pattern.first(), text.first()) {
        (None, None) => true,
        (Some(b'*'), _) => {
            glob(&pattern[1..], text) || (!text.is_empty() && glob(pattern, &text[1..]))
        }
        (Some(b'?'), Some(_)) => glob(&pattern[1..], &text[1..]),
        (Some(p), Some(t)) if p.eq_ignore_ascii_case(t) => glob(&pattern[1..], &text[1..]),
        _ => false,
    }
}

/// `$HOME`.
pub(crate) fn home_dir() -> Option<PathBuf> {
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
}

/// `~/x` -> `$HOME/x`; other paths unchanged.
pub(crate) fn expand_tilde(path: &str) -> PathBuf {
    match (path.strip_prefix("~/"), home_dir()) {
        (Some(rest), Some(home)) => home.join(rest),
        _ if path == "~" => home_dir().unwrap_or_else(|| PathBuf::from(path)),
        _ => PathBuf::from(path),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_value_wins_and_wildcards_apply() {
        let config = SshConfig::parse(
            "# comment\nHost h200 h200-*\n  HostName 10.0.0.5\n  User ubuntu\n  Port 2222\n  \
             IdentityFile ~/.ssh/h200\n  ProxyJump bastion\n\nHost *\n  User nobody\n  \
             IdentityFile ~/.ssh/id_default\nHost !h200 other\n  Port 1\n",
        );
        let entry = config.lookup("h200");
        assert_eq!(entry.host_name.as_deref(), Some("10.0.0.5"));
        assert_eq!(entry.user.as_deref(), Some("ubuntu"));
        assert_eq!(entry.port, Some(2222));
        assert_eq!(
            entry.identity_files,
            vec!["~/.ssh/h200", "~/.ssh/id_default"]
        );
        assert_eq!(entry.proxy_jump.as_deref(), Some("bastion"));
        let other = config.lookup("other");
        assert_eq!(other.user.as_deref(), Some("nobody"));
        assert_eq!(other.port, Some(1));
        assert_eq!(other.host_name, None);
    }

    #[test]
    fn glob_matches_like_ssh() {
        assert!(glob(b"h20-?", b"h20-1"));
        assert!(!glob(b"h20-?", b"h20-10"));
        assert!(glob(b"*.example.com", b"a.example.com"));
        assert!(!glob(b"*.example.com", b"example.org"));
    }
}
