#!/usr/bin/env python3
"""How well could a mined workflow's branches be decided from the query alone?

For every tool, the decision "does this task call it?" is scored on held-out records
(val + test of the bench's seeded 5:2:3 split) by four policies, each trained on the opt
records only:
  take      always take the tool's route (what a judge that reads the first option does)
  majority  the answer most opt records give
  5-nn      the vote of the 5 opt records whose query words are nearest by Jaccard
            similarity (words: lowercase letter runs of at least 3, as the cues use)
  cue       the mined cue rule, for the tools that have cues: take it iff the query holds
            one of the cue words (cues given on the command line, as `flowmem mine` prints)

Usage: decisions.py SPLIT_DIR [tool=cue,cue ...]
  SPLIT_DIR holds opt.jsonl, val.jsonl and test.jsonl (scripts/bench-quality.sh writes
  them under OUT/DOMAIN/split/; test.jsonl there is the same as OUT/DOMAIN/test.jsonl).
"""
import json
import re
import sys
from collections import Counter


def words(query):
    return {w for w in re.findall(r"[a-z]+", query.lower()) if len(w) >= 3}


def load(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def main():
    split = sys.argv[1]
    cues = {}
    for arg in sys.argv[2:]:
        tool, _, cue = arg.partition("=")
        cues[tool] = cue.split(",")
    opt = load(f"{split}/opt.jsonl")
    held = load(f"{split}/val.jsonl") + load(f"{split}/test.jsonl")
    train = [(words(r["query"]), {c["tool"] for c in r["orchestration"]}) for r in opt]
    test = [(words(r["query"]), {c["tool"] for c in r["orchestration"]}) for r in held]
    tools = sorted(Counter(t for _, ts in train for t in ts))
    print(f"{len(train)} opt records, {len(test)} held-out records; right answers out of {len(test)}")
    print(f"{'tool':34} {'calls':>5} {'take':>5} {'major':>5} {'5-nn':>5} {'cue':>5}")
    for tool in tools:
        calls = sum(tool in ts for _, ts in test)
        majority_takes = 2 * sum(tool in ts for _, ts in train) > len(train)
        knn = cue = 0
        for query, ts in test:
            near = sorted(((len(query & q) / len(query | q), tool in t) for q, t in train), key=lambda x: -x[0])[:5]
            knn += (sum(took for _, took in near) >= 3) == (tool in ts)
            if tool in cues:
                cue += any(c in query for c in cues[tool]) == (tool in ts)
        major = calls if majority_takes else len(test) - calls
        print(f"{tool:34} {calls:5} {calls:5} {major:5} {knn:5} {cue if tool in cues else '-':>5}")


if __name__ == "__main__":
    main()
