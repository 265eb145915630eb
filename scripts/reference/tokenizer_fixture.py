#!/usr/bin/env python3
"""Writes the tokenizer parity fixture of flowmem-llm-local.

The reference tokenizer is built here, independently of the Rust code: the GGUF is read
with the `gguf` Python package (not candle), and the tokenizer is assembled with the
Python `tokenizers` package from the GGUF's tokens and merges, configured like
SmolLM2's published tokenizer.json (digits split singly, then GPT-2 byte-level BPE).

Usage (throwaway venv; nothing is installed into the repository):
    python3 -m venv /tmp/tokref && /tmp/tokref/bin/pip install gguf==0.19.0 tokenizers==0.23.3
    /tmp/tokref/bin/python scripts/reference/tokenizer_fixture.py \
        ~/.cache/flowmem/models/SmolLM2-135M-Instruct.Q4_1.gguf \
        crates/llm-local/tests/fixtures/tokenizer.json
"""
import json
import sys

import gguf
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

CONTROL = 3  # GGUF token_type of control tokens

TEXTS = [
    "Hello, world!",
    "The quick brown fox jumps over the lazy dog.",
    "  leading and trailing spaces  ",
    "tabs\tand\nnewlines\n\n\nend",
    "1234567890",
    "Order #A-1029 costs $1,299.99 (incl. 20% VAT).",
    "3.14159 and 2e-10 and -42",
    "café naïve résumé über straße",
    "日本語のテキストと中文文本",
    "Привет, мир! Καλημέρα κόσμε.",
    "emoji 😀🎉👍🏽 and ❤️",
    "fn main() { println!(\"{}\", 1 + 2); }",
    "def f(x):\n    return x ** 2  # square\n",
    "SELECT id, name FROM users WHERE age >= 18 ORDER BY name;",
    "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 3}}",
    "[{\"a\":1},{\"b\":[true,false,null]}]",
    "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n",
    "text<|im_end|>more<|endoftext|>",
    "don't won't I'm you're they've we'll she'd",
    "DON'T SHOUT",
    "https://example.com/path?query=1&b=two#frag",
    "user@example.com, +1 (555) 010-9999",
    "    indented code\n\tand tabs",
    "a\u00a0non-breaking\u2003em-space",
    "!!!???...---***",
    "CamelCaseIdentifier snake_case_identifier kebab-case",
    "2026-11-30T09:51:44Z",
    "Mixing123Numbers456With789Text",
    "",
    " ",
    "\n",
]


def field(reader, key):
    return reader.fields[key].contents()


def build(path):
    reader = gguf.GGUFReader(path)
    tokens = field(reader, "tokenizer.ggml.tokens")
    types = field(reader, "tokenizer.ggml.token_type")
    merges = [tuple(m.split(" ", 1)) for m in field(reader, "tokenizer.ggml.merges")]
    vocab = {tok: i for i, tok in enumerate(tokens)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    specials = [AddedToken(t, special=True, normalized=False) for t, ty in zip(tokens, types) if ty == CONTROL]
    tok.add_special_tokens(specials)
    return tok


def main():
    gguf_path, out_path = sys.argv[1], sys.argv[2]
    tok = build(gguf_path)
    cases = [{"text": t, "ids": tok.encode(t, add_special_tokens=False).ids} for t in TEXTS]
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump({"source": "scripts/reference/tokenizer_fixture.py", "cases": cases}, f, ensure_ascii=False, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
