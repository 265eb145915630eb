#!/usr/bin/env python3
"""Writes the conformance parity fixture of flowmem-mining from PM4Py 2.7.23.11.

For every shared XES log and for the IM and IMf(0.2) trees PM4Py discovers on it, this
converts the tree to a Petri net with PM4Py's own converter and records, as figures only:
- the net's size and a digest of its structure (place names, silent transition names,
  visible labels, arcs), so the Rust side can check that its conversion builds the same
  net before comparing any replay figure;
- token-based replay (PM4Py's default parameters): fitting cases, log fitness, average
  trace fitness, and the missing, consumed, remaining and produced tokens summed over
  cases;
- alignments (PM4Py's default variant, standard costs: 10000 per log or model move, 1 per
  silent move): the best-worst cost, and per variant the raw optimal cost. The per-trace
  fitness PM4Py reports is 1 - (cost // 10000) / (len + bwc // 10000); the script asserts
  that identity for every variant, so the integers determine PM4Py's floats exactly.
  The log-level figures (average fitness, fitting percentage, log fitness) are recorded too;
- ETConformance precision (token-based, PM4Py's default precision).

Cases are the log's cases with their events stably sorted by timestamp (events without one
last), as PM4Py's discovery sees them and as flowmem's `XesLog::to_event_log` builds them.
Variants are listed sorted by their activity sequence (Python tuple order, which is
flowmem's byte order of UTF-8 names).

Usage (throwaway venv; nothing is installed into the repository):
    python3 -m venv /tmp/pm4py-conform && /tmp/pm4py-conform/bin/pip install pm4py==2.7.23.11
    PM4PY_SHOW_PROGRESS_BAR=False /tmp/pm4py-conform/bin/python \
        scripts/reference/pm4py_conformance.py ../shared/data/xes \
        crates/mining/tests/fixtures/pm4py_conformance.json [--nets /tmp/nets] [--only LOG]

`--nets DIR` also writes each net's canonical structure text (the digest's input) there,
for debugging a mismatch. A log whose alignments PM4Py does not finish within
`--max-align-secs` (default 900) per model keeps its other figures and says why in
`alignments_skipped`.
"""
import argparse
import hashlib
import json
import os
import re
import sys
import time
from collections import Counter

import pandas as pd
import pm4py
from pm4py.algo.conformance.alignments.petri_net import algorithm as alignments
from pm4py.algo.conformance.tokenreplay.variants import token_replay
from pm4py.algo.evaluation.precision.variants import etconformance_token
from pm4py.algo.evaluation.replay_fitness.variants import alignment_based as ali_fitness
from pm4py.algo.evaluation.replay_fitness.variants import token_replay as tr_fitness
from pm4py.objects.conversion.process_tree import converter as tree_converter
from pm4py.objects.log.obj import Event, EventLog, Trace

MOVE = 10000


def cases_of(path):
    """The cases as tuples of activities, each stably sorted by timestamp (NaT last)."""
    df = pm4py.read_xes(path)
    df = df[df["concept:name"].notna()].copy()
    df["@@file_order"] = range(len(df))
    if "time:timestamp" in df.columns:
        df["@@t"] = pd.to_datetime(df["time:timestamp"], utc=True, errors="coerce")
    else:
        df["@@t"] = pd.NaT
    df = df.sort_values(["@@t", "@@file_order"], kind="stable", na_position="last")
    first_seen = {}
    traces = {}
    for case, act, order in zip(df["case:concept:name"], df["concept:name"], df["@@file_order"]):
        traces.setdefault(case, []).append(act)
        first_seen[case] = min(first_seen.get(case, order), order)
    return [tuple(traces[c]) for c in sorted(traces, key=lambda c: first_seen[c])]


def event_log(traces):
    return EventLog([Trace([Event({"concept:name": a}) for a in t]) for t in traces])


def canonical_net(net, im, fm):
    lines = []
    for t in net.transitions:
        ins = ",".join(sorted(a.source.name for a in t.in_arcs))
        outs = ",".join(sorted(a.target.name for a in t.out_arcs))
        name = t.name if t.label is None else "'" + t.label + "'"
        lines.append(f"T {name} | {ins} | {outs}")
    lines.sort()
    lines += ["P " + " ".join(sorted(p.name for p in net.places))]
    lines += ["I " + " ".join(f"{p.name}:{n}" for p, n in sorted(im.items(), key=lambda x: x[0].name))]
    lines += ["F " + " ".join(f"{p.name}:{n}" for p, n in sorted(fm.items(), key=lambda x: x[0].name))]
    return "\n".join(lines) + "\n"


def figures(tree_text, cases, variants, net_dir, tag, max_align_secs):
    tree = pm4py.parse_process_tree(tree_text)
    net, im, fm = tree_converter.apply(tree)
    text = canonical_net(net, im, fm)
    if net_dir:
        with open(os.path.join(net_dir, tag + ".net.txt"), "w") as f:
            f.write(tree_text + "\n" + text)
    out = {
        "net": {
            "places": len(net.places),
            "transitions": len(net.transitions),
            "silent": sum(1 for t in net.transitions if t.label is None),
            "arcs": len(net.arcs),
            "md5": hashlib.md5(text.encode()).hexdigest(),
        }
    }
    keys = sorted(variants)
    counts = [variants[k] for k in keys]

    # Token-based replay, PM4Py's defaults, one trace per variant weighted by its count.
    params = {token_replay.Parameters.SHOW_PROGRESS_BAR: False}
    started = time.time()
    replayed = token_replay.apply(event_log(keys), net, im, fm, parameters=params)
    tr_secs = time.time() - started
    expanded = [r for r, n in zip(replayed, counts) for _ in range(n)]
    fit = tr_fitness.evaluate(expanded)
    out["token_replay"] = {
        "fitting_cases": sum(n for r, n in zip(replayed, counts) if r["trace_is_fit"]),
        "log_fitness": fit["log_fitness"],
        "average_trace_fitness": fit["average_trace_fitness"],
        "missing": sum(r["missing_tokens"] * n for r, n in zip(replayed, counts)),
        "consumed": sum(r["consumed_tokens"] * n for r, n in zip(replayed, counts)),
        "remaining": sum(r["remaining_tokens"] * n for r, n in zip(replayed, counts)),
        "produced": sum(r["produced_tokens"] * n for r, n in zip(replayed, counts)),
        "secs": round(tr_secs, 3),
    }

    # Alignments, PM4Py's default variant and costs.
    params = {
        alignments.Parameters.SHOW_PROGRESS_BAR: False,
        alignments.Parameters.PARAM_MAX_ALIGN_TIME: max_align_secs,
    }
    started = time.time()
    aligned = alignments.apply(event_log(keys), net, im, fm, parameters=params)
    ali_secs = time.time() - started
    if any(a is None for a in aligned):
        out["alignments_skipped"] = (
            f"PM4Py did not align {sum(a is None for a in aligned)} of {len(aligned)} variants "
            f"within {max_align_secs} s"
        )
    else:
        bwcs = {a["bwc"] - len(k) * MOVE for a, k in zip(aligned, keys)}
        assert len(bwcs) == 1, bwcs
        bwc = bwcs.pop()
        for a, k in zip(aligned, keys):
            den = (len(k) * MOVE + bwc) // MOVE
            want = 1 - (a["cost"] // MOVE) / den if den > 0 else 0
            assert a["fitness"] == want, (k, a["fitness"], want)
        fit = ali_fitness.evaluate([a for a, n in zip(aligned, counts) for _ in range(n)])
        out["alignments"] = {
            "bwc": bwc,
            "costs": [a["cost"] for a in aligned],
            "average_fitness": fit["averageFitness"],
            "percentage_fitting": fit["percFitTraces"],
            "log_fitness": fit["log_fitness"],
            "secs": round(ali_secs, 3),
        }

    started = time.time()
    out["precision"] = etconformance_token.apply(
        event_log(cases), net, im, fm, parameters={etconformance_token.Parameters.SHOW_PROGRESS_BAR: False}
    )
    out["precision_secs"] = round(time.time() - started, 3)
    return out


def compact(text):
    """Puts lists of integers (the per-variant costs) on one line."""
    return re.sub(r"\[\s*(\d+(?:,\s*\d+)*)\s*\]", lambda m: "[" + ",".join(m.group(1).split(",")).replace(" ", "").replace("\n", "") + "]", text)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("data")
    parser.add_argument("out")
    parser.add_argument("--nets")
    parser.add_argument("--only", action="append")
    parser.add_argument("--max-align-secs", type=float, default=900.0)
    args = parser.parse_args()
    assert pm4py.__version__ == "2.7.23.11", pm4py.__version__
    trees = json.load(open(os.path.join(args.data, "pm4py-trees.json")))["logs"]
    doc = {"pm4py_version": pm4py.__version__, "how": __doc__.split("\n\n")[1].strip(), "logs": {}}
    if os.path.exists(args.out):
        doc["logs"] = json.load(open(args.out))["logs"]
    if args.nets:
        os.makedirs(args.nets, exist_ok=True)
    for name in sorted(trees):
        if args.only and name not in args.only:
            continue
        print(name, file=sys.stderr, flush=True)
        cases = cases_of(os.path.join(args.data, name))
        variants = Counter(cases)
        entry = {"cases": len(cases), "variants": len(variants)}
        for key, tree_key in (("im", "im_tree"), ("imf02", "imf02_tree")):
            entry[key] = figures(trees[name][tree_key], cases, variants, args.nets, f"{name}.{key}", args.max_align_secs)
            print(f"  {key}: {json.dumps({k: v for k, v in entry[key].items() if k != 'alignments'})}", file=sys.stderr, flush=True)
        doc["logs"][name] = entry
        with open(args.out + ".tmp", "w") as f:
            f.write(compact(json.dumps(doc, indent=1, sort_keys=True)) + "\n")
        os.replace(args.out + ".tmp", args.out)


if __name__ == "__main__":
    main()
