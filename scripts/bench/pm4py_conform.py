"""Times PM4Py's conformance checking on XES logs for scripts/bench-conformance.sh.

For each log and model (PM4Py's own IM and IMf(0.2) trees from pm4py-trees.json, as
Petri nets from its converter): pm4py.read_xes, then token-based replay
(pm4py.fitness_token_based_replay) and alignments (pm4py.fitness_alignments), each
timed on its own after the read; end to end is read plus the algorithm. A model whose
alignments PM4Py did not finish for the reference fixture is not aligned here either.
Prints CSV rows: log,model,read_ms,token_replay_ms,alignments_ms (empty when skipped)
"""
import json
import os
import sys
import time

os.environ.setdefault("PM4PY_SHOW_PROGRESS_BAR", "False")

import pandas as pd  # noqa: E402
import pm4py  # noqa: E402


def main():
    data, fixture = sys.argv[1], sys.argv[2]
    trees = json.load(open(os.path.join(data, "pm4py-trees.json")))["logs"]
    reference = json.load(open(fixture))["logs"]
    for name in sys.argv[3:]:
        started = time.perf_counter()
        log = pm4py.read_xes(os.path.join(data, name))
        timestamps = log.get("time:timestamp")
        if timestamps is None or not pd.api.types.is_datetime64_any_dtype(timestamps):
            # PM4Py's conformance functions refuse a data frame without timestamps; such
            # logs go through the legacy EventLog object, as in pm4py_mine.py.
            started = time.perf_counter()
            log = pm4py.read_xes(os.path.join(data, name), return_legacy_log_object=True)
        read_ms = (time.perf_counter() - started) * 1e3
        for model, key in (("im", "im_tree"), ("imf02", "imf02_tree")):
            net, im, fm = pm4py.convert_to_petri_net(pm4py.parse_process_tree(trees[name][key]))
            started = time.perf_counter()
            pm4py.fitness_token_based_replay(log, net, im, fm)
            token_ms = (time.perf_counter() - started) * 1e3
            align_ms = ""
            if "alignments" in reference[name][model]:
                started = time.perf_counter()
                pm4py.fitness_alignments(log, net, im, fm)
                align_ms = f"{(time.perf_counter() - started) * 1e3:.3f}"
            print(f"{name},{model},{read_ms:.3f},{token_ms:.3f},{align_ms}", flush=True)


if __name__ == "__main__":
    main()
