//! Zero-copy scanning of an OpenAI-compatible SSE stream. Bytes go in as the socket yields
//! them; complete `data:` lines come out classified: does the chunk carry output (content,
//! reasoning or tool calls, or new tokens per usage) and is some of it the answer rather than
//! reasoning, what usage does it report (with the prompt tokens served from the prefix cache
//! and the reasoning tokens, and llama.cpp's `timings.cache_n`), is it an error, is it
//! `[DONE]`. A minimal JSON walker reads only those fields: no allocation per chunk, no tree.
//! Not here: timing (the caller stamps each read) and what the figures mean (metrics).

use memchr::{memchr, memchr2};

/// What one `data:` event said.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Event {
    /// `choices` was present and not empty.
    pub has_choices: bool,
    /// Some choice carried non-empty text, content, reasoning or tool calls.
    pub carries_output: bool,
    /// Some choice carried answer output: text, content or tool calls (not reasoning).
    pub carries_answer: bool,
    /// `usage.prompt_tokens`, when reported in this chunk.
    pub prompt_tokens: Option<u32>,
    /// `usage.completion_tokens` (cumulative), when reported in this chunk.
    pub completion_tokens: Option<u32>,
    /// `usage.prompt_tokens_details.cached_tokens`: prompt tokens served from the prefix
    /// cache (vLLM, SGLang, llama.cpp), when reported in this chunk.
    pub cached_tokens: Option<u32>,
    /// `usage.completion_tokens_details.reasoning_tokens`, when reported in this chunk.
    pub reasoning_tokens: Option<u32>,
    /// llama.cpp's `timings.cache_n`: prompt tokens reused from the slot's cache.
    pub cache_n: Option<u32>,
    /// The chunk is an error object (`{"error": ...}`).
    pub error: bool,
    /// `data: [DONE]`.
    pub done: bool,
    /// The payload was not valid JSON of the expected shape.
    pub malformed: bool,
}

/// Longest line accepted (1 MiB): a line is one event, a few hundred bytes from a real
/// server; one without an end (a server that never sends a newline) would otherwise be
/// buffered without bound.
pub const MAX_LINE: usize = 1 << 20;

/// A line passed [`MAX_LINE`] without ending.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the server sent a line longer than {} MiB without a newline", MAX_LINE >> 20)]
pub struct LineTooLong;

/// Splits a byte stream into `data:` payloads. Keeps only the bytes of a line split across
/// reads (usually none), at most [`MAX_LINE`].
#[derive(Debug, Default)]
pub struct Scanner {
    partial: Vec<u8>,
}

impl Scanner {
    /// Feed one read; call `on_data(payload)` for every complete `data:` line in order. A
    /// line longer than [`MAX_LINE`] is an error (what was buffered of it is dropped).
    pub fn feed(
        &mut self,
        mut bytes: &[u8],
        mut on_data: impl FnMut(&[u8]),
    ) -> Result<(), LineTooLong> {
        if !self.partial.is_empty() {
            match memchr(b'\n', bytes) {
                None => return self.keep(bytes),
                Some(end) => {
                    let mut line = std::mem::take(&mut self.partial);
                    line.extend_from_slice(&bytes[..end]);
                    dispatch(&line, &mut on_data);
                    line.clear();
                    self.partial = line;
                    bytes = &bytes[end + 1..];
                }
            }
        }
        while let Some(end) = memchr(b'\n', bytes) {
            dispatch(&bytes[..end], &mut on_data);
            bytes = &bytes[end + 1..];
        }
        self.keep(bytes)
    }

    /// Buffer the start of an unfinished line, within [`MAX_LINE`].
    fn keep(&mut self, bytes: &[u8]) -> Result<(), LineTooLong> {
        if self.partial.len() + bytes.len() > MAX_LINE {
            self.partial = Vec::new();
            return Err(LineTooLong);
        }
        self.partial.extend_from_slice(bytes);
        Ok(())
    }

    /// Bytes of an unterminated last line (a stream that ended without a newline).
    pub fn finish(&mut self, on_data: impl FnMut(&[u8])) {
        let mut on_data = on_data;
        if !self.partial.is_empty() {
            let line = std::mem::take(&mut self.partial);
            dispatch(&line, &mut on_data);
        }
    }
}

fn dispatch(line: &[u8], on_data: &mut impl FnMut(&[u8])) {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    if let Some(rest) = line.strip_prefix(b"data:") {
        let payload = rest.strip_prefix(b" ").unwrap_or(rest);
        if !payload.is_empty() {
            on_data(payload);
        }
    }
}

/// Classify one `data:` payload. `text` receives the raw (still JSON-escaped) bytes of every
/// output string, for callers that re-tokenize the answer; pass `None` to skip.
pub fn classify(payload: &[u8], mut text: Option<&mut Vec<u8>>) -> Event {
    let mut ev = Event::default();
    if payload == b"[DONE]" {
        ev.done = true;
        return ev;
    }
    let mut c = Cursor { b: payload, i: 0 };
    if chunk(&mut c, &mut ev, &mut text).is_none() {
        ev.malformed = true;
    }
    ev
}

struct Cursor<'a> {
    b: &'a [u8],
    i: usize,
}

impl<'a> Cursor<'a> {
    fn ws(&mut self) {
        while self.i < self.b.len() && matches!(self.b[self.i], b' ' | b'\t' | b'\n' | b'\r') {
            self.i += 1;
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.ws();
        self.b.get(self.i).copied()
    }

    fn eat(&mut self, byte: u8) -> Option<()> {
        (self.peek()? == byte).then(|| self.i += 1)
    }

    /// A string; returns its raw contents (escapes left as they are).
    fn string(&mut self) -> Option<&'a [u8]> {
        self.eat(b'"')?;
        let start = self.i;
        loop {
            let at = self.i + memchr2(b'"', b'\\', &self.b[self.i..])?;
            if self.b[at] == b'\\' {
                self.i = at + 2;
            } else {
                self.i = at + 1;
                return Some(&self.b[start..at]);
            }
        }
    }

    fn number(&mut self) -> Option<u32> {
        self.ws();
        let start = self.i;
        while self.i < self.b.len() && self.b[self.i].is_ascii_digit() {
            self.i += 1;
        }
        let digits = std::str::from_utf8(&self.b[start..self.i]).ok()?;
        let n = digits.parse().ok();
        // Tolerate a fraction or exponent by skipping it.
        while self.i < self.b.len()
            && matches!(
                self.b[self.i],
                b'.' | b'e' | b'E' | b'+' | b'-' | b'0'..=b'9'
            )
        {
            self.i += 1;
        }
        n
    }

    fn skip(&mut self) -> Option<()> {
        match self.peek()? {
            b'"' => self.string().map(|_| ()),
            b'{' => self.object(|c, _| c.skip()),
            b'[' => self.array(|c| c.skip()).map(|_| ()),
            _ => {
                let start = self.i;
                while self.i < self.b.len()
                    && !matches!(
                        self.b[self.i],
                        b',' | b'}' | b']' | b' ' | b'\n' | b'\r' | b'\t'
                    )
                {
                    self.i += 1;
                }
                (self.i > start).then_some(())
            }
        }
    }

    /// `{ "key": value, ... }`, calling `field(cursor, key)` positioned at each value.
    fn object(&mut self, mut field: impl FnMut(&mut Self, &[u8]) -> Option<()>) -> Option<()> {
        self.eat(b'{')?;
        if self.peek()? == b'}' {
            self.i += 1;
            return Some(());
        }
        loop {
            let key = self.string()?;
            self.eat(b':')?;
            field(self, key)?;
            match self.peek()? {
                b',' => self.i += 1,
                b'}' => {
                    self.i += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// `[ value, ... ]`; returns the number of elements.
    fn array(&mut self, mut item: impl FnMut(&mut Self) -> Option<()>) -> Option<usize> {
        self.eat(b'[')?;
        if self.peek()? == b']' {
            self.i += 1;
            return Some(0);
        }
        let mut n = 0;
        loop {
            item(self)?;
            n += 1;
            match self.peek()? {
                b',' => self.i += 1,
                b']' => {
                    self.i += 1;
                    return Some(n);
                }
                _ => return None,
            }
        }
    }

    /// `null`, or a string; returns the string when present and non-empty.
    fn nonempty_string(&mut self) -> Option<Option<&'a [u8]>> {
        if self.peek()? == b'"' {
            let s = self.string()?;
            Some((!s.is_empty()).then_some(s))
        } else {
            self.skip().map(|_| None)
        }
    }
}

fn chunk(c: &mut Cursor<'_>, ev: &mut Event, text: &mut Option<&mut Vec<u8>>) -> Option<()> {
    c.object(|c, key| match key {
        b"choices" => {
            if c.peek()? != b'[' {
                return c.skip();
            }
            let n = c.array(|c| choice(c, ev, text))?;
            ev.has_choices |= n > 0;
            Some(())
        }
        b"usage" => {
            if c.peek()? != b'{' {
                return c.skip();
            }
            c.object(|c, key| match key {
                b"prompt_tokens" if c.peek()? != b'n' => {
                    ev.prompt_tokens = c.number();
                    Some(())
                }
                b"completion_tokens" if c.peek()? != b'n' => {
                    ev.completion_tokens = c.number();
                    Some(())
                }
                b"prompt_tokens_details" => count_in(c, b"cached_tokens", &mut ev.cached_tokens),
                b"completion_tokens_details" => {
                    count_in(c, b"reasoning_tokens", &mut ev.reasoning_tokens)
                }
                _ => c.skip(),
            })
        }
        b"timings" => count_in(c, b"cache_n", &mut ev.cache_n),
        b"error" => {
            ev.error |= c.peek()? != b'n';
            c.skip()
        }
        _ => c.skip(),
    })
}

fn choice(c: &mut Cursor<'_>, ev: &mut Event, text: &mut Option<&mut Vec<u8>>) -> Option<()> {
    if c.peek()? != b'{' {
        return c.skip();
    }
    c.object(|c, key| match key {
        b"text" => output(c, ev, text, true),
        b"delta" | b"message" => {
            if c.peek()? != b'{' {
                return c.skip();
            }
            c.object(|c, key| match key {
                b"content" => output(c, ev, text, true),
                b"reasoning_content" | b"reasoning" => output(c, ev, text, false),
                b"tool_calls" => {
                    if c.peek()? == b'[' {
                        let n = c.array(|c| c.skip())?;
                        ev.carries_output |= n > 0;
                        ev.carries_answer |= n > 0;
                        Some(())
                    } else {
                        c.skip()
                    }
                }
                _ => c.skip(),
            })
        }
        _ => c.skip(),
    })
}

/// `{"<key>": N, ...}` (or null): the count `key` into `slot`, other fields skipped.
fn count_in(c: &mut Cursor<'_>, key: &[u8], slot: &mut Option<u32>) -> Option<()> {
    if c.peek()? != b'{' {
        return c.skip();
    }
    c.object(|c, k| {
        if k == key && c.peek()? != b'n' {
            *slot = c.number();
            Some(())
        } else {
            c.skip()
        }
    })
}

/// A string of output; `answer`: content or text, not reasoning.
fn output(
    c: &mut Cursor<'_>,
    ev: &mut Event,
    text: &mut Option<&mut Vec<u8>>,
    answer: bool,
) -> Option<()> {
    if let Some(s) = c.nonempty_string()? {
        ev.carries_output = true;
        ev.carries_answer |= answer;
        if let Some(buf) = text.as_deref_mut() {
            buf.extend_from_slice(s);
        }
    }
    Some(())
}

/// Decode text gathered by `classify` (raw JSON string contents) into a string.
pub fn unescape(raw: &[u8]) -> String {
    let mut quoted = Vec::with_capacity(raw.len() + 2);
    quoted.push(b'"');
    quoted.extend_from_slice(raw);
    quoted.push(b'"');
    serde_json::from_slice(&quoted).unwrap_or_else(|_| String::from_utf8_lossy(raw).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(s: &str) -> Event {
        classify(s.as_bytes(), None)
    }

    #[test]
    fn role_only_chat_chunk_carries_no_output() {
        let e = ev(
            r#"{"id":"x","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}"#,
        );
        assert!(e.has_choices && !e.carries_output && !e.malformed);
        let e = ev(r#"{"choices":[{"delta":{"role":"assistant","content":null}}]}"#);
        assert!(e.has_choices && !e.carries_output);
    }

    #[test]
    fn content_reasoning_and_tool_calls_carry_output() {
        assert!(ev(r#"{"choices":[{"delta":{"content":"hi"}}]}"#).carries_output);
        assert!(ev(r#"{"choices":[{"delta":{"reasoning_content":"hm"}}]}"#).carries_output);
        assert!(ev(r#"{"choices":[{"delta":{"reasoning":"hm","content":null}}]}"#).carries_output);
        assert!(ev(r#"{"choices":[{"delta":{"tool_calls":[{"id":"1"}]}}]}"#).carries_output);
        assert!(!ev(r#"{"choices":[{"delta":{"tool_calls":[]}}]}"#).carries_output);
        assert!(ev(r#"{"choices":[{"index":0,"text":" a","logprobs":null}]}"#).carries_output);
    }

    #[test]
    fn usage_is_read_and_escaped_keys_do_not_confuse() {
        let e = ev(
            r#"{"choices":[{"text":"\"usage\": {\"completion_tokens\": 99}"}],"usage":{"prompt_tokens":12,"total_tokens":15,"completion_tokens":3}}"#,
        );
        assert_eq!(e.prompt_tokens, Some(12));
        assert_eq!(e.completion_tokens, Some(3));
        let e = ev(r#"{"choices":[],"usage":null}"#);
        assert!(!e.has_choices && e.completion_tokens.is_none() && !e.malformed);
    }

    #[test]
    fn reasoning_is_output_but_not_answer() {
        let e = ev(r#"{"choices":[{"delta":{"reasoning_content":"hm","content":null}}]}"#);
        assert!(e.carries_output && !e.carries_answer);
        let e = ev(r#"{"choices":[{"delta":{"reasoning":"hm","content":""}}]}"#);
        assert!(e.carries_output && !e.carries_answer);
        let e = ev(r#"{"choices":[{"delta":{"reasoning_content":"hm","content":"a"}}]}"#);
        assert!(e.carries_answer);
        assert!(ev(r#"{"choices":[{"delta":{"content":"a"}}]}"#).carries_answer);
        assert!(ev(r#"{"choices":[{"text":"a"}]}"#).carries_answer);
        assert!(ev(r#"{"choices":[{"delta":{"tool_calls":[{"id":"1"}]}}]}"#).carries_answer);
    }

    #[test]
    fn cached_reasoning_and_llama_cpp_cache_counts_are_read() {
        let e = ev(
            r#"{"choices":[],"usage":{"prompt_tokens":40,"completion_tokens":9,"prompt_tokens_details":{"cached_tokens":32,"audio_tokens":null},"completion_tokens_details":{"reasoning_tokens":7}}}"#,
        );
        assert_eq!(
            (e.prompt_tokens, e.cached_tokens, e.reasoning_tokens),
            (Some(40), Some(32), Some(7))
        );
        let e = ev(
            r#"{"choices":[],"usage":{"prompt_tokens":40,"prompt_tokens_details":null,"completion_tokens_details":{"reasoning_tokens":null}}}"#,
        );
        assert!(e.cached_tokens.is_none() && e.reasoning_tokens.is_none() && !e.malformed);
        let e = ev(
            r#"{"choices":[{"index":0,"delta":{},"finish_reason":"length"}],"timings":{"cache_n":236,"prompt_n":1,"prompt_ms":30.9},"usage":{"prompt_tokens":237}}"#,
        );
        assert_eq!((e.cache_n, e.prompt_tokens), (Some(236), Some(237)));
    }

    #[test]
    fn errors_done_and_garbage() {
        assert!(ev(r#"{"error":{"message":"boom","code":500}}"#).error);
        assert!(!ev(r#"{"error":null,"choices":[]}"#).error);
        assert!(ev("[DONE]").done);
        assert!(ev("{not json").malformed);
    }

    #[test]
    fn a_line_without_end_is_cut_at_the_limit() {
        let mut s = Scanner::default();
        let piece = vec![b'x'; 64 * 1024];
        let mut fed = 0;
        let err = loop {
            match s.feed(&piece, |_| panic!("no line ended")) {
                Ok(()) => fed += piece.len(),
                Err(e) => break e,
            }
            assert!(fed <= MAX_LINE, "buffered past the limit");
        };
        assert_eq!(err, LineTooLong);
        assert!(
            s.partial.capacity() <= MAX_LINE,
            "the buffer was not dropped"
        );
        // A line just under the limit, ended, is fine.
        let mut s = Scanner::default();
        let mut line = b"data: ".to_vec();
        line.resize(MAX_LINE - 1, b'y');
        let mut n = 0;
        s.feed(&line, |_| n += 1).unwrap();
        s.feed(b"\n", |_| n += 1).unwrap();
        assert_eq!(n, 1);
    }

    #[test]
    fn lines_split_across_reads_are_joined() {
        let stream = b"data: {\"choices\":[{\"text\":\"a\"}]}\n\n: comment\ndata: {\"choices\":[{\"text\":\"b\\\"\"}]}\r\n\r\ndata: [DONE]\n\n";
        for split in 0..stream.len() {
            let mut s = Scanner::default();
            let mut got: Vec<Vec<u8>> = Vec::new();
            s.feed(&stream[..split], |p| got.push(p.to_vec())).unwrap();
            s.feed(&stream[split..], |p| got.push(p.to_vec())).unwrap();
            s.finish(|p| got.push(p.to_vec()));
            assert_eq!(got.len(), 3, "split at {split}");
            assert_eq!(got[2], b"[DONE]");
            let mut text = Vec::new();
            for p in &got {
                classify(p, Some(&mut text));
            }
            assert_eq!(unescape(&text), "ab\"");
        }
    }
}
