//! The server's own tokenizer over HTTP: vLLM/SGLang-style `POST /tokenize` and `/detokenize`.
//! Used when no `tokenizer.json` is available on the client machine. Requests go through the
//! cold-path HTTP layer ([`crate::fetch`]), which reads the whole body as bytes; the reply is
//! parsed as JSON from those bytes, so a chunk boundary inside a character cannot split it.
//!
//! Blocking: datasets are built before the run, from synchronous code. Each request runs on a
//! small current-thread runtime of its own, built for it; so call these from a thread that is
//! not driving an async runtime (`tokio::task::spawn_blocking`, as the callers do), never from
//! inside a task.
//!
//! The server does not say its vocabulary size, so random prompts draw ids from
//! `FIRST_TEXT_ID..VOCAB_END`: every tokenizer of a current LLM has more than 30,000 ids, and
//! the lowest ids are where special tokens live.

use std::time::Duration;

use serde_json::{Value, json};

use super::DatasetError;
use crate::fetch::{self, Origin};
use crate::units::error_chain;

const FIRST_TEXT_ID: u32 = 1_000;
const VOCAB_END: u32 = 30_000;
const TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug)]
pub(crate) struct ServerTokenizer {
    /// The server's root (a `/v1` base URL answers `/tokenize` at its root).
    origin: Origin,
    model: String,
}

impl ServerTokenizer {
    /// Check the endpoint answers once, then keep its address.
    pub(crate) fn connect(base_url: &str, model: &str) -> Result<Self, DatasetError> {
        let origin = Origin::parse(base_url).map_err(|e| DatasetError::Server {
            url: base_url.to_string(),
            message: format!("only http:// base URLs can serve /tokenize ({e})"),
        })?;
        let prefix = origin.prefix().trim_end_matches("/v1");
        let origin = if prefix.is_empty() {
            origin.root()
        } else {
            Origin::parse(&format!("http://{}{prefix}", origin.authority())).map_err(|e| {
                DatasetError::Server {
                    url: base_url.to_string(),
                    message: e.to_string(),
                }
            })?
        };
        let server = ServerTokenizer {
            origin,
            model: model.to_string(),
        };
        server.encode("hello")?;
        Ok(server)
    }

    #[cfg(test)]
    pub(crate) fn unconnected() -> Self {
        ServerTokenizer {
            origin: Origin::parse("http://unconnected").expect("a valid URL"),
            model: String::new(),
        }
    }

    /// Random ids are drawn below this; ids under `FIRST_TEXT_ID` are never drawn (see module doc).
    pub(crate) fn vocab_end(&self) -> u32 {
        VOCAB_END
    }

    pub(crate) fn first_text_id() -> u32 {
        FIRST_TEXT_ID
    }

    pub(crate) fn encode(&self, text: &str) -> Result<Vec<u32>, DatasetError> {
        let body = json!({"model": self.model, "prompt": text, "add_special_tokens": false});
        let reply = self.post("/tokenize", &body)?;
        reply
            .get("tokens")
            .and_then(Value::as_array)
            .map(|ids| {
                ids.iter()
                    .filter_map(|v| v.as_u64().map(|x| x as u32))
                    .collect()
            })
            .ok_or_else(|| self.bad("/tokenize", "no `tokens` array in the reply"))
    }

    /// Tokens of one user message with the server's chat template applied (vLLM's `/tokenize`
    /// of `messages` with the generation prompt).
    pub(crate) fn count_chat(&self, content: &str) -> Result<usize, DatasetError> {
        self.count_messages(&[("user", content)])
    }

    /// Tokens of `(role, content)` messages with the server's chat template applied.
    pub(crate) fn count_messages(&self, messages: &[(&str, &str)]) -> Result<usize, DatasetError> {
        let messages: Vec<Value> = messages
            .iter()
            .map(|(role, content)| json!({"role": role, "content": content}))
            .collect();
        let body = json!({
            "model": self.model,
            "messages": messages,
            "add_generation_prompt": true,
            "add_special_tokens": false,
        });
        let reply = self.post("/tokenize", &body)?;
        reply
            .get("count")
            .and_then(Value::as_u64)
            .map(|n| n as usize)
            .or_else(|| reply.get("tokens").and_then(Value::as_array).map(Vec::len))
            .ok_or_else(|| self.bad("/tokenize", "no `count` or `tokens` in the reply"))
    }

    /// The `/tokenize` URL (named in results).
    pub(crate) fn tokenize_url(&self) -> String {
        self.origin.url("/tokenize")
    }

    pub(crate) fn decode(&self, ids: &[u32]) -> Result<String, DatasetError> {
        let body = json!({"model": self.model, "tokens": ids});
        let reply = self.post("/detokenize", &body)?;
        reply
            .get("prompt")
            .and_then(Value::as_str)
            .map(str::to_string)
            .ok_or_else(|| self.bad("/detokenize", "no `prompt` string in the reply"))
    }

    fn bad(&self, path: &str, message: &str) -> DatasetError {
        DatasetError::Server {
            url: self.origin.url(path),
            message: message.to_string(),
        }
    }

    /// POST `body` to `path` and parse the whole reply as JSON (see the module doc for the
    /// runtime it runs on).
    fn post(&self, path: &str, body: &Value) -> Result<Value, DatasetError> {
        let err = |message: String| DatasetError::Server {
            url: self.origin.url(path),
            message,
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| err(format!("cannot start a runtime for the request: {e}")))?;
        let reply = runtime
            .block_on(fetch::post_json(&self.origin, path, body, TIMEOUT))
            .map_err(|e| err(error_chain(&e)))?;
        if reply.status != 200 {
            return Err(err(format!(
                "HTTP {}: {}",
                reply.status,
                reply.text_lossy().trim()
            )));
        }
        serde_json::from_slice(&reply.body).map_err(|e| err(format!("reply is not JSON: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};

    use super::*;

    /// A server answering every request with a chunked JSON reply whose first chunk ends
    /// inside the two bytes of "é".
    fn split_char_server() -> String {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/v1", listener.local_addr().unwrap());
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut s) = stream else { break };
                let mut buf = [0u8; 4096];
                let _ = s.read(&mut buf);
                let first: &[u8] = b"{\"prompt\":\"\xc3";
                let second: &[u8] = b"\xa9\",\"tokens\":[1]}";
                let mut reply =
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n"
                        .to_vec();
                for chunk in [first, second] {
                    reply.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
                    reply.extend_from_slice(chunk);
                    reply.extend_from_slice(b"\r\n");
                }
                reply.extend_from_slice(b"0\r\n\r\n");
                let _ = s.write_all(&reply);
            }
        });
        url
    }

    #[test]
    fn a_chunk_boundary_inside_a_character_decodes_whole() {
        let url = split_char_server();
        let server = ServerTokenizer::connect(&url, "m").unwrap();
        assert_eq!(server.decode(&[1]).unwrap(), "é");
    }
}
