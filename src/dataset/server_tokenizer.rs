//! The server's own tokenizer over HTTP: vLLM/SGLang-style `POST /tokenize` and `/detokenize`.
//! Blocking (datasets are built before the run, off the async runtime) and plain HTTP/1.1 over
//! `std::net`. Used when no `tokenizer.json` is available on the client machine.
//!
//! The server does not say its vocabulary size, so random prompts draw ids from
//! `FIRST_TEXT_ID..VOCAB_END`: every tokenizer of a current LLM has more than 30,000 ids, and
//! the lowest ids are where special tokens live.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use serde_json::{Value, json};

use super::DatasetError;

const FIRST_TEXT_ID: u32 = 1_000;
const VOCAB_END: u32 = 30_000;
const TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug)]
pub(crate) struct ServerTokenizer {
    authority: String,
    model: String,
}

impl ServerTokenizer {
    /// Check the endpoint answers once, then keep its address.
    pub(crate) fn connect(base_url: &str, model: &str) -> Result<Self, DatasetError> {
        let authority = base_url
            .trim_end_matches('/')
            .strip_prefix("http://")
            .ok_or_else(|| DatasetError::Server {
                url: base_url.to_string(),
                message: "only http:// base URLs can serve /tokenize".into(),
            })?
            .trim_end_matches("/v1")
            .to_string();
        let server = ServerTokenizer {
            authority,
            model: model.to_string(),
        };
        server.encode("hello")?;
        Ok(server)
    }

    #[cfg(test)]
    pub(crate) fn unconnected() -> Self {
        ServerTokenizer {
            authority: String::new(),
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
        let body = json!({
            "model": self.model,
            "messages": [{"role": "user", "content": content}],
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
        format!("http://{}/tokenize", self.authority)
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
            url: format!("http://{}{path}", self.authority),
            message: message.to_string(),
        }
    }

    fn post(&self, path: &str, body: &Value) -> Result<Value, DatasetError> {
        let err = |message: String| DatasetError::Server {
            url: format!("http://{}{path}", self.authority),
            message,
        };
        let payload = body.to_string();
        let mut stream = TcpStream::connect(&self.authority).map_err(|e| err(e.to_string()))?;
        stream.set_read_timeout(Some(TIMEOUT)).ok();
        let request = format!(
            "POST {path} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{payload}",
            self.authority,
            payload.len()
        );
        stream
            .write_all(request.as_bytes())
            .map_err(|e| err(e.to_string()))?;
        let mut raw = Vec::new();
        stream
            .read_to_end(&mut raw)
            .map_err(|e| err(e.to_string()))?;
        let text = String::from_utf8_lossy(&raw);
        let (head, body) = text
            .split_once("\r\n\r\n")
            .ok_or_else(|| err("malformed HTTP reply".into()))?;
        let status = head.split_whitespace().nth(1).unwrap_or("");
        if status != "200" {
            return Err(err(format!("HTTP {status}: {}", body.trim())));
        }
        let body = if head
            .to_ascii_lowercase()
            .contains("transfer-encoding: chunked")
        {
            dechunk(body)
        } else {
            body.to_string()
        };
        serde_json::from_str(&body).map_err(|e| err(format!("reply is not JSON: {e}")))
    }
}

/// Join the pieces of a `Transfer-Encoding: chunked` body.
fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        body = rest[n..].trim_start_matches("\r\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dechunks_bodies() {
        assert_eq!(
            dechunk("5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"),
            "hello world"
        );
    }
}
