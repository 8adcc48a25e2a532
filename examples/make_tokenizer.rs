//! Writes `data/tokenizer/tokenizer.json`: the small real Hugging Face tokenizer the project ships
//! for tests and the demo (a WordLevel model over ~5,000 pronounceable pseudo-words with the
//! `Whitespace` pre-tokenizer). Any prompt made of its words round-trips: the token count equals
//! the number of whitespace-separated words, which is also how the mock server counts by default.
//!
//! Run: `cargo run --example make_tokenizer` (the output is committed; rerun only to change it).

use serde_json::{Map, Value, json};

fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let consonants = "bdfgklmnprstvz";
    let vowels = "aeiou";
    let syllables: Vec<String> = consonants
        .chars()
        .flat_map(|c| vowels.chars().map(move |v| format!("{c}{v}")))
        .collect();
    let mut vocab = Map::new();
    vocab.insert("[UNK]".into(), json!(0));
    let mut next = 1u32;
    let mut add = |word: String, vocab: &mut Map<String, Value>| {
        vocab.insert(word, json!(next));
        next += 1;
    };
    for s in &syllables {
        add(s.clone(), &mut vocab);
    }
    for a in &syllables {
        for b in &syllables {
            add(format!("{a}{b}"), &mut vocab);
        }
    }
    let tokenizer = json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": [{
            "id": 0, "content": "[UNK]", "single_word": false, "lstrip": false,
            "rstrip": false, "normalized": false, "special": true
        }],
        "normalizer": null,
        "pre_tokenizer": {"type": "Whitespace"},
        "post_processor": null,
        "decoder": null,
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "[UNK]"}
    });
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let path = root.join("data/tokenizer/tokenizer.json");
    std::fs::create_dir_all(path.parent().expect("has a parent"))?;
    std::fs::write(&path, serde_json::to_string(&tokenizer)? + "\n")?;
    // Prove it loads with the same library the client uses.
    let loaded = tokenizers::Tokenizer::from_file(&path)?;
    eprintln!(
        "wrote {} ({} tokens)",
        path.display(),
        loaded.get_vocab_size(true)
    );
    Ok(())
}
