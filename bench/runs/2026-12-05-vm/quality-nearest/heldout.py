#!/usr/bin/env python3
"""Route decisions of a mined graph's branches on held-out records, offline.

For each branch that mining decided by the nearest mined queries (`nearest`), and for
each held-out record, the route the record took (by the skeleton's proxy: the first
route whose label is a tool the record called, else `skip`) is compared with
- nearest: the route most of the 5 nearest mined queries took (Jaccard over the words
  flowmem calls decision_words: letters only, at least three long; examples sharing no
  word do not vote; ties to the nearer in sum, then the first), as the executor decides;
- major:   the route most mined records took (the branch's `taken`).
It also reports each branch's leave-one-out count over the mined records, which must
match the note mining wrote in the branch's description.

usage: heldout.py GRAPH.json HELDOUT.jsonl
"""
import json
import re
import sys


def decision_words(query):
    words = {w.lower() for w in re.split(r"[\W_]+", query) if w}
    return sorted(w for w in words if len(w) >= 3 and w.isalpha())


def jaccard(a, b):
    a, b = set(a), set(b)
    union = len(a | b)
    return len(a & b) / union if union else 0.0


def nearest_route(words, examples, k=5):
    near = [(jaccard(words, ex), route, idx) for idx, (route, ex) in enumerate(examples)]
    near = sorted((n for n in near if n[0] > 0), key=lambda n: (-n[0], n[2]))[:k]
    tally = {}
    for sim, route, _ in near:
        votes, total, first = tally.get(route, (0, 0.0, len(tally)))
        tally[route] = (votes + 1, total + sim, first)
    if not tally:
        return None
    return max(tally.items(), key=lambda kv: (kv[1][0], kv[1][1], -kv[1][2]))[0]


def main(graph_path, heldout_path):
    graph = json.load(open(graph_path))
    queries = graph["queries"]
    heldout = [json.loads(line) for line in open(heldout_path)]
    print(f"# {graph_path}: {len(queries)} mined queries; {heldout_path}: {len(heldout)} held-out records")
    print(f"{'branch':10s} {'routes':58s} {'loo':>7s} {'nearest':>8s} {'major':>6s}")
    totals = [0, 0, 0]
    for node in graph["nodes"]:
        if node["kind"] != "branch" or not node.get("nearest"):
            continue
        routes = list(node["nearest"])
        examples = [(route, queries[idx]) for route in routes for idx in node["nearest"][route]]
        loo = sum(
            nearest_route(ex, examples[:i] + examples[i + 1 :]) == route for i, (route, ex) in enumerate(examples)
        )
        major = max(node["taken"].items(), key=lambda kv: kv[1])[0]
        right_near = right_major = 0
        for record in heldout:
            tools = {call["tool"] for call in record["orchestration"]}
            truth = next((r for r in routes if r != "skip" and r.split("#")[0] in tools), "skip")
            right_near += nearest_route(decision_words(record["query"]), examples) == truth
            right_major += major == truth
        totals = [totals[0] + len(heldout), totals[1] + right_near, totals[2] + right_major]
        label = " | ".join(f"{r} {node['taken'].get(r, 0)}" for r in routes)
        print(f"{node['id']:10s} {label:58s} {loo:3d}/{len(examples):<3d} {right_near:8d} {right_major:6d}")
    print(f"{'all':10s} {'':58s} {'':>7s} {totals[1]:8d} {totals[2]:6d}   of {totals[0]}")


if __name__ == "__main__":
    main(*sys.argv[1:3])
