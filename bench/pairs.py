"""Comparisons that survive a busy machine: two commands timed as interleaved pairs (A, B, A, B, ...), each pair's
ratio B/A, reported as the median ratio with its spread (min-max). A minute of load moves both halves of the pairs
it falls in, not every ratio of the run, as one baseline timed once did (issue 60).

A comparison whose spread is wider than BOUND (max - min over the median) is not published: its ratio is null and
`unstable` says why, with the pairs kept for reading.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

# The widest spread a published ratio may have: (max - min) / median.
BOUND = 0.5
PAIRS = 5


def clock(run: Callable[[], object]) -> float:
    start = time.monotonic()
    run()
    return time.monotonic() - start


def interleaved(baseline: Callable[[], object], measured: Callable[[], object], pairs: int = PAIRS,
                label: str = "", bound: float = BOUND, before: Callable[[], object] | None = None) -> dict:
    """`pairs` rounds of (baseline, measured), each timed (`before`, where given, runs untimed ahead of each: a
    host reinstalled); {ratio (median of measured/baseline, null where the spread is over `bound`), spread
    [min, max], the medians of both in seconds, the pairs}."""
    if pairs < 1:
        raise ValueError("at least one pair")
    rows = []
    for index in range(pairs):
        if before:
            before()
        first = clock(baseline)
        if before:
            before()
        second = clock(measured)
        rows.append({"baseline_s": round(first, 2), "measured_s": round(second, 2), "ratio": round(second / first, 3)})
        print(f"  {label} pair {index + 1}/{pairs}: {first:.1f} s / {second:.1f} s -> {second / first:.2f}", flush=True)
    return summarize(rows, bound)


def summarize(rows: list[dict], bound: float = BOUND) -> dict:
    ratios = [row["ratio"] for row in rows]
    median = statistics.median(ratios)
    spread = [round(min(ratios), 2), round(max(ratios), 2)]
    width = (max(ratios) - min(ratios)) / median if median else float("inf")
    found = {"ratio": round(median, 2), "spread": spread, "pairs": len(rows),
             "baseline_s": round(statistics.median(r["baseline_s"] for r in rows), 1),
             "measured_s": round(statistics.median(r["measured_s"] for r in rows), 1), "rows": rows}
    if width > bound:
        found["unstable"] = (f"spread {spread[0]}-{spread[1]} is {width:.0%} of the median {median:.2f}, wider than "
                             f"{bound:.0%}: not published; run it again on a quieter machine or with more pairs")
        found["ratio"] = None
    return found
