"""Times PM4Py on XES logs for scripts/bench-mining.sh.

For each log and repetition: pm4py.read_xes (import; the legacy EventLog object for
logs without timestamps, which PM4Py's miner rejects as a data frame), then
pm4py.discover_process_tree_inductive with noise 0.0 (IM) and 0.2 (IMf).
Prints CSV rows: log,miner,rep,read_ms,discover_ms
"""
import os
import sys
import time

os.environ.setdefault("PM4PY_SHOW_PROGRESS_BAR", "False")

import pandas as pd  # noqa: E402
import pm4py  # noqa: E402


def main():
    reps = int(sys.argv[1])
    for path in sys.argv[2:]:
        name = os.path.basename(path)
        for rep in range(reps):
            started = time.perf_counter()
            log = pm4py.read_xes(path)
            timestamps = log.get("time:timestamp")
            if timestamps is None or not pd.api.types.is_datetime64_any_dtype(timestamps):
                # PM4Py's miner refuses a data frame without timestamps; such logs go
                # through the legacy EventLog object, in file order.
                started = time.perf_counter()
                log = pm4py.read_xes(path, return_legacy_log_object=True)
            read_ms = (time.perf_counter() - started) * 1e3
            for miner, noise in (("im", 0.0), ("imf", 0.2)):
                started = time.perf_counter()
                pm4py.discover_process_tree_inductive(log, noise_threshold=noise)
                discover_ms = (time.perf_counter() - started) * 1e3
                print(f"{name},{miner},{rep},{read_ms:.3f},{discover_ms:.3f}", flush=True)


if __name__ == "__main__":
    main()
