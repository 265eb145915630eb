#!/usr/bin/env python3
"""The cue-precision rule of a mined graph's branches on held-out records, offline.

For each branch with `cued` counts, and each route it counts: among the held-out records
whose query holds one of the route's cues (words as flowmem's decision_words: letters
only, at least three long, lowercased), how often the route the record took (by the
skeleton's proxy: the first route whose label is a tool the record called, else `skip`)
is the cued route (what the executor takes with no judge when more than half of the
mined queries holding the cue took it) and how often it is the most taken route.

usage: cued.py GRAPH.json HELDOUT.jsonl
"""
import json
import re
import sys


def decision_words(query):
    words = {w.lower() for w in re.split(r"[\W_]+", query) if w}
    return sorted(w for w in words if len(w) >= 3 and w.isalpha())


def main(graph_path, heldout_path):
    graph = json.load(open(graph_path))
    if "output" in graph:
        graph = graph["output"]
    heldout = [json.loads(line) for line in open(heldout_path)]
    print(f"# {graph_path}; {heldout_path}: {len(heldout)} held-out records")
    print(f"{'branch':10s} {'route':34s} {'mined':>7s} {'rule':>5s} {'held':>5s} {'cued right':>10s} {'major right':>11s}")
    for node in graph["nodes"]:
        if node["kind"] != "branch" or not node.get("cued"):
            continue
        routes = list(node["taken"])
        major = max(node["taken"].items(), key=lambda kv: kv[1])[0]
        for route, (took, held) in node["cued"].items():
            cues = set(node["cues"][route])
            holding = [r for r in heldout if cues & set(decision_words(r["query"]))]
            truth = []
            for record in holding:
                tools = {call["tool"] for call in record["orchestration"]}
                truth.append(next((r for r in routes if r != "skip" and r.split("#")[0] in tools), "skip"))
            rule = "takes" if 2 * took > held else "no"
            right_cued = sum(t == route for t in truth)
            right_major = sum(t == major for t in truth)
            print(
                f"{node['id']:10s} {route:34s} {took:3d}/{held:<3d} {rule:>5s} {len(holding):5d} {right_cued:10d} {right_major:11d}"
                + ("   (decided by the nearest mined queries first)" if node.get("nearest") else "")
            )


if __name__ == "__main__":
    main(*sys.argv[1:3])
