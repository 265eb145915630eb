//! A SentencePiece-style tokenizer over a GGUF vocabulary (`tokenizer.ggml.model =
//! llama`), as llama.cpp runs it: Gemma 3's.
//!
//! Encoding first cuts the text at special tokens (control and user-defined ones such
//! as `<start_of_turn>` or Gemma's runs of newlines), longest token first. Each piece of
//! plain text then has its spaces replaced by `▁` and is split into characters, and the
//! adjacent pair whose joined text is the vocabulary's highest-scoring token is merged,
//! again and again, leftmost first on ties. What ends up outside the vocabulary is
//! spelt by byte tokens (`<0x..>`).

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};

/// The character that stands for a space in the vocabulary.
const SPACE: char = '\u{2581}';

/// The SentencePiece model: pieces, scores, and the special tokens matched in text.
pub(crate) struct Spm {
    /// Every piece's id; for a piece listed twice, the later id (as llama.cpp's map).
    ids: HashMap<String, u32>,
    scores: Vec<f32>,
    /// `<0xNN>` tokens by byte.
    bytes: [u32; 256],
    /// Special tokens by their text, and their texts' distinct byte lengths.
    specials: HashMap<String, u32>,
    special_lengths: Vec<usize>,
    /// Whether a byte can start a special token.
    special_first: [bool; 256],
}

/// A symbol of the merge: a byte range of the text, linked to its neighbours.
struct Symbol {
    start: usize,
    len: usize,
    prev: Option<usize>,
    next: Option<usize>,
}

/// A candidate merge of the symbols `left` and `right`.
struct Bigram {
    left: usize,
    right: usize,
    score: f32,
    size: usize,
}

impl PartialEq for Bigram {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Bigram {}
impl PartialOrd for Bigram {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Bigram {
    /// Higher scores first, then the leftmost.
    fn cmp(&self, other: &Self) -> Ordering {
        self.score.total_cmp(&other.score).then_with(|| other.left.cmp(&self.left))
    }
}

impl Spm {
    /// Builds the model from the vocabulary. `special[i]` says whether token `i` is
    /// matched in text before the merges (control and user-defined tokens). Returns
    /// the missing byte token's name when the vocabulary lacks one.
    pub(crate) fn new(tokens: &[String], scores: Vec<f32>, special: &[bool]) -> Result<Spm, String> {
        let mut ids = HashMap::with_capacity(tokens.len());
        for (i, t) in tokens.iter().enumerate() {
            ids.insert(t.clone(), id(i));
        }
        let mut bytes = [0u32; 256];
        for (b, slot) in bytes.iter_mut().enumerate() {
            let name = format!("<0x{b:02X}>");
            *slot = *ids.get(&name).ok_or(name)?;
        }
        let mut specials = HashMap::new();
        let mut special_first = [false; 256];
        for (i, t) in tokens.iter().enumerate().filter(|(i, t)| special[*i] && !t.is_empty()) {
            specials.insert(t.clone(), id(i));
            special_first[usize::from(t.as_bytes()[0])] = true;
        }
        let mut special_lengths: Vec<usize> = specials.keys().map(String::len).collect();
        special_lengths.sort_unstable();
        special_lengths.dedup();
        Ok(Spm { ids, scores, bytes, specials, special_lengths, special_first })
    }

    /// Token ids of `text`.
    pub(crate) fn encode(&self, text: &str) -> Vec<u32> {
        let mut out = Vec::new();
        for fragment in self.partition(text) {
            match fragment {
                Fragment::Special(t) => out.push(t),
                Fragment::Text(s) => self.encode_plain(&s.replace(' ', "\u{2581}"), &mut out),
            }
        }
        out
    }

    /// Cuts `text` at special tokens: each special token present, longest first, splits
    /// every plain fragment at each of its occurrences, left to right.
    fn partition<'t>(&self, text: &'t str) -> Vec<Fragment<'t>> {
        let mut fragments = vec![Fragment::Text(text)];
        for (token, id) in self.specials_in(text) {
            let mut next = Vec::with_capacity(fragments.len());
            for fragment in fragments {
                let Fragment::Text(mut rest) = fragment else {
                    next.push(fragment);
                    continue;
                };
                while let Some(at) = rest.find(token) {
                    if at > 0 {
                        next.push(Fragment::Text(&rest[..at]));
                    }
                    next.push(Fragment::Special(id));
                    rest = &rest[at + token.len()..];
                }
                if !rest.is_empty() {
                    next.push(Fragment::Text(rest));
                }
            }
            fragments = next;
        }
        fragments
    }

    /// The special tokens that occur in `text`, longest first (ties by id). Only these
    /// can cut a fragment of it, so the others need no search.
    fn specials_in(&self, text: &str) -> Vec<(&str, u32)> {
        let bytes = text.as_bytes();
        let mut found: HashMap<&str, u32> = HashMap::new();
        for (at, &b) in bytes.iter().enumerate() {
            if !self.special_first[usize::from(b)] || !text.is_char_boundary(at) {
                continue;
            }
            for &len in &self.special_lengths {
                let Some(piece) = text.get(at..at + len) else { continue };
                if let Some((key, &id)) = self.specials.get_key_value(piece) {
                    found.insert(key.as_str(), id);
                }
            }
        }
        let mut found: Vec<(&str, u32)> = found.into_iter().collect();
        found.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then(a.1.cmp(&b.1)));
        found
    }

    /// The merges over one plain fragment (spaces already escaped).
    fn encode_plain(&self, text: &str, out: &mut Vec<u32>) {
        let mut symbols: Vec<Symbol> = text
            .char_indices()
            .enumerate()
            .map(|(i, (start, ch))| Symbol { start, len: ch.len_utf8(), prev: i.checked_sub(1), next: Some(i + 1) })
            .collect();
        let Some(last) = symbols.last_mut() else { return };
        last.next = None;
        let mut queue = BinaryHeap::new();
        for i in 1..symbols.len() {
            self.try_add(text, &symbols, i - 1, i, &mut queue);
        }
        while let Some(bigram) = queue.pop() {
            let (l, r) = (&symbols[bigram.left], &symbols[bigram.right]);
            if l.len == 0 || r.len == 0 || l.len + r.len != bigram.size {
                continue;
            }
            let right_next = r.next;
            symbols[bigram.left].len += symbols[bigram.right].len;
            symbols[bigram.right].len = 0;
            symbols[bigram.left].next = right_next;
            if let Some(n) = right_next {
                symbols[n].prev = Some(bigram.left);
            }
            if let Some(p) = symbols[bigram.left].prev {
                self.try_add(text, &symbols, p, bigram.left, &mut queue);
            }
            if let Some(n) = right_next {
                self.try_add(text, &symbols, bigram.left, n, &mut queue);
            }
        }
        // A merged symbol is a piece of the vocabulary by construction; a single
        // character may not be, and is spelt in bytes.
        let mut at = Some(0);
        while let Some(i) = at {
            let s = &symbols[i];
            let piece = &text[s.start..s.start + s.len];
            match self.ids.get(piece) {
                Some(&token) => out.push(token),
                None => out.extend(piece.bytes().map(|b| self.bytes[usize::from(b)])),
            }
            at = s.next;
        }
    }

    /// Queues the merge of `left` and `right` if their joined text is a piece.
    fn try_add(&self, text: &str, symbols: &[Symbol], left: usize, right: usize, queue: &mut BinaryHeap<Bigram>) {
        let start = symbols[left].start;
        let size = symbols[left].len + symbols[right].len;
        let Some(&token) = self.ids.get(&text[start..start + size]) else { return };
        let score = self.scores.get(token as usize).copied().unwrap_or(0.0);
        queue.push(Bigram { left, right, score, size });
    }
}

enum Fragment<'t> {
    Text(&'t str),
    Special(u32),
}

/// The bytes token text `piece` stands for: `▁` is a space, `<0xNN>` a byte.
pub(crate) fn piece_bytes(piece: &str, is_byte_token: bool) -> Vec<u8> {
    if is_byte_token
        && let Some(hex) = piece.strip_prefix("<0x").and_then(|p| p.strip_suffix('>'))
        && let Ok(b) = u8::from_str_radix(hex, 16)
    {
        return vec![b];
    }
    piece.replace(SPACE, " ").into_bytes()
}

fn id(i: usize) -> u32 {
    u32::try_from(i).unwrap_or(u32::MAX)
}
