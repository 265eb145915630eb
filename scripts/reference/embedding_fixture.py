#!/usr/bin/env python3
"""Writes the embedding parity fixture of flowmem-llm-local.

The reference is sentence-transformers itself, loading all-MiniLM-L6-v2 from the files
`scripts/setup/35-embedding-model.sh` extracted (no network): its `encode` with
`normalize_embeddings=True` is what the model card prescribes (mean pooling over the
real tokens, then L2 normalisation, at most 256 tokens). For each of 50 varied texts
the fixture keeps the token count the reference tokenizer gives and the vector, stored
compactly as base64 of little-endian float16 (384 × 2 bytes); float16 rounding moves a
cosine by less than 1e-6, far below the test's 0.999 bound.

Usage (throwaway venv; nothing is installed into the repository):
    bash scripts/setup/35-embedding-model.sh
    python3 -m venv /tmp/stref && /tmp/stref/bin/pip install sentence-transformers==6.2.0
    /tmp/stref/bin/python scripts/reference/embedding_fixture.py \
        ~/.cache/flowmem/models/all-MiniLM-L6-v2 crates/llm-local/tests/fixtures/embeddings.json
"""
import base64
import json
import os
import sys

import numpy as np

TEXTS = [
    "Exchange a delivered item for a different size.",
    "swap the keyboard I got for a clicky one",
    "Cancel my pending order #W1234567, I ordered it by mistake.",
    "Where is my parcel? It was supposed to arrive yesterday.",
    "Return the water bottle and refund it to my gift card.",
    "Change the shipping address of order W4435622 to 123 Main St, Springfield.",
    "Book a one-way flight from JFK to SFO on May 20 in economy.",
    "I need to add a checked bag to my reservation ABC123.",
    "What is the status of flight HAT170?",
    "Upgrade my seat to business class, please.",
    "The quick brown fox jumps over the lazy dog.",
    "A",
    "",
    "   leading and trailing spaces   ",
    "tabs\tand\nnewlines\n\nend",
    "1234567890 3.14159 -42 2e-10",
    "Order #A-1029 costs $1,299.99 (incl. 20% VAT).",
    "café naïve résumé über straße Ångström",
    "日本語のテキストと中文文本",
    "Привет, мир! Καλημέρα κόσμε.",
    "emoji 😀🎉👍🏽 and ❤️",
    "fn main() { println!(\"{}\", 1 + 2); }",
    "SELECT id, name FROM users WHERE age >= 18 ORDER BY name;",
    "{\"name\": \"get_order_details\", \"arguments\": {\"order_id\": \"#W42\"}}",
    "https://example.com/path?query=1&b=two#frag",
    "user@example.com, +1 (555) 010-9999",
    "don't won't I'm you're they've we'll she'd",
    "DON'T SHOUT AT ME",
    "CamelCaseIdentifier snake_case_identifier kebab-case",
    "get_user_details find_user_id_by_email exchange_delivered_order_items",
    "2026-11-30T09:51:44Z",
    "!!!???...---***",
    "antidisestablishmentarianism pneumonoultramicroscopicsilicovolcanoconiosis",
    "The cat sat on the mat. The dog sat on the log. The bird sat on the word.",
    "Workflow memory helps only when the agent is shown the right workflow.",
    "Find the user by email, look up the order, then exchange the items.",
    "Your name is Yusuf Rossi and your zip code is 19122. You want to know how many t-shirt options are available.",
    "You are mia_garcia_4516 (mia.garcia2723@example.com). You just got into gaming and want to cancel or return everything not associated with it.",
    "Steps: 1) authenticate the user; 2) list the orders; 3) pick the delivered one; 4) ask for confirmation; 5) exchange.",
    "a a a a a a a a a a a a a a a a a a a a",
    "The meeting is at 3pm — don't be late… or else.",
    "Ich möchte meine Bestellung stornieren.",
    "Je voudrais échanger cet article contre une autre couleur.",
    "Quiero devolver los auriculares y recibir un reembolso.",
    "Negative review: the lamp broke after two days and support never answered.",
    "Positive review: fast delivery, great quality, would buy again!",
    "x" * 300,
    "word " * 400,
    " ".join(f"token{i}" for i in range(300)),
    "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor incididunt ut labore et dolore magna aliqua. " * 5,
]
assert len(TEXTS) == 50, len(TEXTS)


def main():
    model_dir, out_path = sys.argv[1], sys.argv[2]
    os.environ["HF_HUB_OFFLINE"] = "1"
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer

    # The three files flowmem reads, plus the pooling and normalisation modules the model
    # card specifies, built here rather than read from the package.
    word = Transformer(model_dir, max_seq_length=256)
    pooling = Pooling(word.get_embedding_dimension(), pooling_mode="mean")
    model = SentenceTransformer(modules=[word, pooling, Normalize()], device="cpu")
    vectors = model.encode(TEXTS, batch_size=8, normalize_embeddings=True, convert_to_numpy=True)
    tokenizer = word.tokenizer
    cases = []
    for text, vector in zip(TEXTS, vectors):
        n_tokens = len(tokenizer(text, truncation=True, max_length=256)["input_ids"])
        packed = base64.b64encode(np.asarray(vector, dtype="<f2").tobytes()).decode()
        cases.append({"text": text, "n_tokens": n_tokens, "f16": packed})
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump({"source": "scripts/reference/embedding_fixture.py", "dim": int(vectors.shape[1]), "cases": cases},
                  f, ensure_ascii=False, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
