//! The tokenizer, rebuilt from the GGUF's own vocabulary and merges.
//!
//! SmolLM2 uses GPT-2 byte-level BPE with the `smollm` pre-tokenizer: digits are split
//! singly, then the GPT-2 regex splits words, and each piece is byte-level encoded and
//! merged. The GGUF carries the tokens, their types and the merges but no
//! `tokenizer.json`, so we assemble a `tokenizers` pipeline from them. Control tokens
//! (GGUF token type 3, such as `<|im_start|>`) are matched as special tokens in text.
//!
//! Gemma 3's GGUF instead carries a SentencePiece vocabulary (`tokenizer.ggml.model =
//! llama`: pieces, scores, token types, byte fallback), which [`crate::spm`] encodes
//! as llama.cpp does.

use std::collections::HashMap;

use candle_core::quantized::gguf_file;
use tokenizers::models::bpe::{BPE, Vocab};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::{AddedToken, PreTokenizerWrapper, Tokenizer};

use crate::error::LocalError;
use crate::spm::{Spm, piece_bytes};

/// GGUF token type of control tokens.
const TOKEN_TYPE_CONTROL: i32 = 3;
/// GGUF token type of user-defined tokens (matched in text like control tokens).
const TOKEN_TYPE_USER_DEFINED: i32 = 4;
/// GGUF token type of byte tokens (`<0x0A>`).
const TOKEN_TYPE_BYTE: i32 = 6;

/// The encoder of one vocabulary family.
enum Encoder {
    /// GPT-2 byte-level BPE (SmolLM2).
    Bpe(Box<Tokenizer>),
    /// SentencePiece pieces and scores (Gemma 3).
    Spm(Box<Spm>),
}

/// A tokenizer built from a GGUF file's vocabulary.
pub struct GgufTokenizer {
    inner: Encoder,
    /// The raw bytes of every token; control tokens map to their literal name.
    token_bytes: Vec<Vec<u8>>,
    /// Whether each token is a control token.
    control: Vec<bool>,
}

impl std::fmt::Debug for GgufTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufTokenizer").field("vocab_size", &self.token_bytes.len()).finish()
    }
}

impl GgufTokenizer {
    /// Builds the tokenizer from a GGUF file's metadata.
    ///
    /// # Errors
    ///
    /// [`LocalError::Gguf`] when the tokens, token types, scores or merges are missing
    /// or malformed, or the tokenizer model is neither GPT-2 byte-level BPE (`gpt2`) nor
    /// SentencePiece (`llama`).
    pub fn from_gguf(content: &gguf_file::Content) -> Result<GgufTokenizer, LocalError> {
        let meta = |key: &str| {
            content
                .metadata
                .get(key)
                .ok_or_else(|| LocalError::Gguf { key: key.to_owned(), problem: "missing".to_owned() })
        };
        let bad = |key: &str, problem: String| LocalError::Gguf { key: key.to_owned(), problem };

        let model =
            meta("tokenizer.ggml.model")?.to_string().map_err(|e| bad("tokenizer.ggml.model", e.to_string()))?;
        if model != "gpt2" && model != "llama" {
            return Err(bad(
                "tokenizer.ggml.model",
                format!("`{model}` is neither byte-level BPE (`gpt2`) nor SentencePiece (`llama`)"),
            ));
        }
        let strings = |key: &str| -> Result<Vec<String>, LocalError> {
            let values = meta(key)?.to_vec().map_err(|e| bad(key, e.to_string()))?;
            values
                .iter()
                .enumerate()
                .map(|(i, v)| v.to_string().cloned().map_err(|e| bad(&format!("{key}[{i}]"), e.to_string())))
                .collect()
        };
        let tokens = strings("tokenizer.ggml.tokens")?;
        let types: Vec<i32> = meta("tokenizer.ggml.token_type")?
            .to_vec()
            .map_err(|e| bad("tokenizer.ggml.token_type", e.to_string()))?
            .iter()
            .enumerate()
            .map(|(i, v)| v.to_i32().map_err(|e| bad(&format!("tokenizer.ggml.token_type[{i}]"), e.to_string())))
            .collect::<Result<_, _>>()?;
        if types.len() != tokens.len() {
            return Err(bad(
                "tokenizer.ggml.token_type",
                format!("has {} entries for {} tokens", types.len(), tokens.len()),
            ));
        }
        if model == "llama" {
            return spm_from_gguf(content, &tokens, &types);
        }
        let merges_raw = strings("tokenizer.ggml.merges")?;

        let mut merges = Vec::with_capacity(merges_raw.len());
        for (i, merge) in merges_raw.iter().enumerate() {
            let Some((a, b)) = merge.split_once(' ') else {
                return Err(bad(&format!("tokenizer.ggml.merges[{i}]"), format!("`{merge}` is not two tokens")));
            };
            merges.push((a.to_owned(), b.to_owned()));
        }
        let vocab: Vocab = tokens.iter().enumerate().map(|(i, t)| (t.clone(), id(i))).collect();
        let bpe = BPE::builder()
            .vocab_and_merges(vocab, merges)
            .build()
            .map_err(|e| bad("tokenizer.ggml.merges", e.to_string()))?;

        let mut inner = Tokenizer::new(bpe);
        let digits = PreTokenizerWrapper::Digits(Digits::new(true));
        let byte_level = PreTokenizerWrapper::ByteLevel(ByteLevel::new(false, true, true));
        inner.with_pre_tokenizer(Some(Sequence::new(vec![digits, byte_level])));
        inner.with_decoder(Some(ByteLevel::new(false, true, true)));

        let control: Vec<bool> = types.iter().map(|&t| t == TOKEN_TYPE_CONTROL).collect();
        let specials: Vec<AddedToken> =
            tokens.iter().zip(&control).filter(|(_, c)| **c).map(|(t, _)| AddedToken::from(t.clone(), true)).collect();
        inner.add_special_tokens(specials).map_err(|e| bad("tokenizer.ggml.token_type", e.to_string()))?;

        let table = unicode_to_byte();
        let token_bytes = tokens
            .iter()
            .zip(&control)
            .map(|(t, &c)| {
                if c {
                    t.as_bytes().to_vec()
                } else {
                    // Characters outside the byte-level alphabet cannot occur in a GPT-2
                    // vocabulary; keep their UTF-8 bytes rather than fail.
                    let mut out = Vec::with_capacity(t.len());
                    for ch in t.chars() {
                        match table.get(&ch) {
                            Some(&b) => out.push(b),
                            None => out.extend_from_slice(ch.encode_utf8(&mut [0; 4]).as_bytes()),
                        }
                    }
                    out
                }
            })
            .collect();
        Ok(GgufTokenizer { inner: Encoder::Bpe(Box::new(inner)), token_bytes, control })
    }

    /// Splits `text` into token ids. Control-token names in the text (`<|im_end|>`)
    /// become their control tokens.
    ///
    /// # Errors
    ///
    /// [`LocalError::Tokenizer`] if the tokenizer fails, which it does not for any
    /// UTF-8 input with this vocabulary.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, LocalError> {
        match &self.inner {
            Encoder::Bpe(inner) => {
                let encoding = inner.encode_fast(text, false).map_err(|e| LocalError::Tokenizer(e.to_string()))?;
                Ok(encoding.get_ids().to_vec())
            }
            Encoder::Spm(spm) => Ok(spm.encode(text)),
        }
    }

    /// Joins tokens back into text, dropping control tokens. Invalid UTF-8 (a
    /// multi-byte character cut by the token limit) is replaced by U+FFFD.
    #[must_use]
    pub fn decode(&self, ids: &[u32]) -> String {
        let bytes = self.decode_bytes(ids);
        String::from_utf8_lossy(&bytes).into_owned()
    }

    /// The raw bytes of `ids`, dropping control tokens.
    #[must_use]
    pub fn decode_bytes(&self, ids: &[u32]) -> Vec<u8> {
        let mut out = Vec::new();
        for &t in ids {
            let t = t as usize;
            if t < self.token_bytes.len() && !self.control[t] {
                out.extend_from_slice(&self.token_bytes[t]);
            }
        }
        out
    }

    /// The number of tokens in the vocabulary.
    #[must_use]
    pub fn vocab_size(&self) -> usize {
        self.token_bytes.len()
    }

    /// The raw bytes of token `id` (for a control token, its name).
    #[must_use]
    pub fn token_bytes(&self, id: u32) -> &[u8] {
        self.token_bytes.get(id as usize).map_or(&[], Vec::as_slice)
    }

    /// Whether token `id` is a control token such as `<|im_end|>`.
    #[must_use]
    pub fn is_control(&self, id: u32) -> bool {
        self.control.get(id as usize).copied().unwrap_or(false)
    }

    /// The id of the control token named `name`, if the vocabulary has one.
    #[must_use]
    pub fn control_id(&self, name: &str) -> Option<u32> {
        self.token_bytes.iter().zip(&self.control).position(|(t, &c)| c && t == name.as_bytes()).map(id)
    }
}

/// The SentencePiece tokenizer of a `llama`-model GGUF vocabulary.
fn spm_from_gguf(content: &gguf_file::Content, tokens: &[String], types: &[i32]) -> Result<GgufTokenizer, LocalError> {
    let key = "tokenizer.ggml.scores";
    let bad = |key: &str, problem: String| LocalError::Gguf { key: key.to_owned(), problem };
    let scores: Vec<f32> = content
        .metadata
        .get(key)
        .ok_or_else(|| bad(key, "missing".to_owned()))?
        .to_vec()
        .map_err(|e| bad(key, e.to_string()))?
        .iter()
        .enumerate()
        .map(|(i, v)| v.to_f32().map_err(|e| bad(&format!("{key}[{i}]"), e.to_string())))
        .collect::<Result<_, _>>()?;
    if scores.len() != tokens.len() {
        return Err(bad(key, format!("has {} entries for {} tokens", scores.len(), tokens.len())));
    }
    let control: Vec<bool> = types.iter().map(|&t| t == TOKEN_TYPE_CONTROL).collect();
    let special: Vec<bool> = types.iter().map(|&t| t == TOKEN_TYPE_CONTROL || t == TOKEN_TYPE_USER_DEFINED).collect();
    let spm = Spm::new(tokens, scores, &special)
        .map_err(|name| bad("tokenizer.ggml.tokens", format!("has no byte token `{name}`")))?;
    let token_bytes = tokens
        .iter()
        .zip(types)
        .map(
            |(t, &ty)| {
                if ty == TOKEN_TYPE_CONTROL { t.as_bytes().to_vec() } else { piece_bytes(t, ty == TOKEN_TYPE_BYTE) }
            },
        )
        .collect();
    Ok(GgufTokenizer { inner: Encoder::Spm(Box::new(spm)), token_bytes, control })
}

/// A vocabulary index as a token id. The GGUF vocabulary has 49,152 entries.
fn id(i: usize) -> u32 {
    u32::try_from(i).unwrap_or(u32::MAX)
}

/// GPT-2's byte-level alphabet, inverted: each printable stand-in character to its byte.
///
/// Printable Latin-1 bytes stand for themselves; the other 68 bytes are mapped, in
/// order, to the characters from U+0100 upwards.
fn unicode_to_byte() -> HashMap<char, u8> {
    let printable = |b: u8| matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
    let mut table = HashMap::with_capacity(256);
    let mut next = 0x100u32;
    for b in 0..=255u8 {
        let ch = if printable(b) {
            char::from(b)
        } else {
            let ch = char::from_u32(next).unwrap_or(char::REPLACEMENT_CHARACTER);
            next += 1;
            ch
        };
        table.insert(ch, b);
    }
    table
}

#[cfg(test)]
mod tests {
    use super::{GgufTokenizer, unicode_to_byte};

    #[derive(serde::Deserialize)]
    struct Fixture {
        cases: Vec<Case>,
    }

    #[derive(serde::Deserialize)]
    struct Case {
        text: String,
        ids: Vec<u32>,
    }

    /// Gemma's SentencePiece tokenizer against llama.cpp's on the same GGUF
    /// (`tests/fixtures/gemma_tokenizer.json`, written by
    /// `scripts/fixtures/gemma.py`): the same ids for every text, and the ids
    /// decode back to the text.
    #[test]
    fn gemma_ids_equal_llama_cpp() {
        let Some(path) = crate::model::gemma_path_for_tests() else { return };
        let mut file = std::fs::File::open(&path).unwrap();
        let content = candle_core::quantized::gguf_file::Content::read(&mut file).unwrap();
        let tokenizer = GgufTokenizer::from_gguf(&content).unwrap();
        let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/gemma_tokenizer.json");
        let fixture: Fixture = serde_json::from_str(&std::fs::read_to_string(&fixture).unwrap()).unwrap();
        assert!(fixture.cases.len() >= 30, "the fixture has {} cases", fixture.cases.len());
        let mut mismatches = Vec::new();
        for case in &fixture.cases {
            let ids = tokenizer.encode(&case.text).unwrap();
            if ids != case.ids {
                mismatches.push(format!("{:?}: got {ids:?}, llama.cpp {:?}", case.text, case.ids));
            }
            // Control tokens decode to nothing; everything else decodes to itself, but
            // for a literal `▁`, which SentencePiece cannot tell from a space.
            let plain: String = tokenizer.decode(&ids);
            let mut expected = case.text.replace('\u{2581}', " ");
            for name in ["<bos>", "<eos>", "<start_of_turn>", "<end_of_turn>"] {
                expected = expected.replace(name, "");
            }
            assert_eq!(plain, expected, "decoding {:?}", case.text);
        }
        assert!(mismatches.is_empty(), "{} mismatches:\n{}", mismatches.len(), mismatches.join("\n"));
    }

    #[test]
    fn byte_alphabet_is_a_bijection() {
        let table = unicode_to_byte();
        assert_eq!(table.len(), 256);
        assert_eq!(table[&'Ġ'], b' ');
        assert_eq!(table[&'Ċ'], b'\n');
        assert_eq!(table[&'A'], b'A');
    }
}
