//! The built-in OpenAI-compatible mock inference server with a batching latency model.
