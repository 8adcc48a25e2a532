//! Request bodies per backend dialect: how each server is told to ignore EOS, to report usage
//! while streaming, and which endpoint shape (completions or chat) carries the prompt. Bodies are
//! serialized once per prompt before the run; the hot path only clones `Bytes`.

use bytes::Bytes;
use serde_json::{Map, Value, json};

use super::ClientConfig;
use crate::dataset::Prompt;
use crate::load::{Backend, Endpoint};

/// What every request of a run shares.
#[derive(Debug, Clone)]
pub struct BodyTemplate<'a> {
    pub backend: Backend,
    pub endpoint: Endpoint,
    pub model: &'a str,
    pub ignore_eos: bool,
    pub extra_body: &'a Map<String, Value>,
}

impl<'a> BodyTemplate<'a> {
    /// The shape every request of a run with `config` shares.
    pub fn of(config: &'a ClientConfig) -> Self {
        BodyTemplate {
            backend: config.backend,
            endpoint: config.endpoint,
            model: &config.model,
            ignore_eos: config.ignore_eos,
            extra_body: &config.extra_body,
        }
    }

    /// The JSON body for one prompt.
    pub fn body(&self, prompt: &Prompt) -> Value {
        let input = match (self.endpoint, &prompt.messages) {
            (Endpoint::Chat, Some(messages)) => ("messages", messages_json(messages)),
            (Endpoint::Completions, _) => ("prompt", json!(prompt.text)),
            (Endpoint::Chat, None) => (
                "messages",
                json!([{"role": "user", "content": prompt.text}]),
            ),
        };
        self.with_input(input, prompt.output_len)
    }

    /// The chat body of one conversation turn, from its `(role, content)` messages.
    pub fn turn_body(&self, messages: &[(&str, &str)], output_len: u32) -> Bytes {
        let body = self.with_input(("messages", messages_json(messages)), output_len);
        Bytes::from(serde_json::to_vec(&body).unwrap_or_default())
    }

    /// The body around its input (`prompt` or `messages`), asking for `output_len` tokens.
    fn with_input(&self, input: (&str, Value), output_len: u32) -> Value {
        let mut body = Map::new();
        body.insert("model".into(), json!(self.model));
        body.insert(input.0.into(), input.1);
        let max_key = match (self.backend, self.endpoint) {
            (Backend::Openai, Endpoint::Chat) => "max_completion_tokens",
            _ => "max_tokens",
        };
        body.insert(max_key.into(), json!(output_len));
        body.insert("stream".into(), json!(true));
        let stream_options = match self.backend {
            // Usage in every chunk gives exact tokens per chunk.
            Backend::Vllm | Backend::Sglang | Backend::Trtllm => {
                json!({"include_usage": true, "continuous_usage_stats": true})
            }
            Backend::Dynamo | Backend::Openai => json!({"include_usage": true}),
        };
        body.insert("stream_options".into(), stream_options);
        if self.ignore_eos {
            match self.backend {
                Backend::Vllm => {
                    body.insert("ignore_eos".into(), json!(true));
                }
                Backend::Sglang => {
                    body.insert("ignore_eos".into(), json!(true));
                    body.insert("min_new_tokens".into(), json!(output_len));
                }
                Backend::Trtllm => {
                    body.insert("ignore_eos".into(), json!(true));
                    body.insert("min_tokens".into(), json!(output_len));
                }
                Backend::Dynamo => {
                    body.insert("nvext".into(), json!({"ignore_eos": true}));
                    body.insert("min_tokens".into(), json!(output_len));
                }
                // The OpenAI API has no such field; strict servers reject unknown ones.
                Backend::Openai => {}
            }
        }
        for (k, v) in self.extra_body {
            body.insert(k.clone(), v.clone());
        }
        Value::Object(body)
    }

    /// Serialized bodies for every prompt.
    pub fn bodies(&self, prompts: &[Prompt]) -> Vec<Bytes> {
        prompts
            .iter()
            .map(|p| Bytes::from(serde_json::to_vec(&self.body(p)).unwrap_or_default()))
            .collect()
    }
}

/// `(role, content)` pairs as the chat API's `messages`.
fn messages_json<R: AsRef<str>, C: AsRef<str>>(messages: &[(R, C)]) -> Value {
    Value::Array(
        messages
            .iter()
            .map(|(role, content)| json!({"role": role.as_ref(), "content": content.as_ref()}))
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prompt() -> Prompt {
        Prompt {
            text: "ba be".into(),
            prompt_len: 2,
            output_len: 7,
            at_us: None,
            session: None,
            messages: None,
        }
    }

    #[test]
    fn dialects_ask_for_exact_output_lengths_their_own_way() {
        let extra = Map::new();
        let t = |backend, endpoint| BodyTemplate {
            backend,
            endpoint,
            model: "m",
            ignore_eos: true,
            extra_body: &extra,
        };
        let v = t(Backend::Vllm, Endpoint::Completions).body(&prompt());
        assert_eq!(v["ignore_eos"], json!(true));
        assert_eq!(v["prompt"], json!("ba be"));
        assert_eq!(v["stream_options"]["continuous_usage_stats"], json!(true));
        let s = t(Backend::Sglang, Endpoint::Chat).body(&prompt());
        assert_eq!(s["min_new_tokens"], json!(7));
        assert_eq!(s["messages"][0]["content"], json!("ba be"));
        let d = t(Backend::Dynamo, Endpoint::Chat).body(&prompt());
        assert_eq!(d["nvext"]["ignore_eos"], json!(true));
        let o = t(Backend::Openai, Endpoint::Chat).body(&prompt());
        assert!(o.get("ignore_eos").is_none());
        assert_eq!(o["max_completion_tokens"], json!(7));
        // A conversation turn: its messages, in the same dialect.
        let turn = t(Backend::Sglang, Endpoint::Chat).turn_body(
            &[
                ("system", "s"),
                ("user", "q"),
                ("assistant", "a"),
                ("user", "r"),
            ],
            9,
        );
        let v: Value = serde_json::from_slice(&turn).unwrap();
        assert_eq!(
            v["messages"][2],
            json!({"role": "assistant", "content": "a"})
        );
        assert_eq!(v["messages"].as_array().unwrap().len(), 4);
        assert_eq!(v["min_new_tokens"], json!(9));
        // A trace's literal messages go out as they are.
        let literal = Prompt {
            messages: Some(vec![
                ("system".into(), "s".into()),
                ("user".into(), "q".into()),
            ]),
            ..prompt()
        };
        let v = t(Backend::Vllm, Endpoint::Chat).body(&literal);
        assert_eq!(
            v["messages"],
            json!([{"role": "system", "content": "s"}, {"role": "user", "content": "q"}])
        );
    }

    #[test]
    fn extra_body_overrides() {
        let mut extra = Map::new();
        extra.insert("temperature".into(), json!(0.0));
        extra.insert("max_tokens".into(), json!(3));
        let t = BodyTemplate {
            backend: Backend::Vllm,
            endpoint: Endpoint::Completions,
            model: "m",
            ignore_eos: false,
            extra_body: &extra,
        };
        let v = t.body(&prompt());
        assert_eq!(v["temperature"], json!(0.0));
        assert_eq!(v["max_tokens"], json!(3));
        assert!(v.get("ignore_eos").is_none());
    }
}
