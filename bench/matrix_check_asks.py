"""Benchmark: the matrix check's question of every pin (spark_matrix_check: is there a wheel of exactly this version
for the target on its step's index?) asked two ways, in one run, as interleaved pairs (bench/pairs.py): each pin in
a pip run of its own (how it was asked until issue 71), and each step's pins in one pip run (ask_together, how it is
asked now; a pin alone only where that run fails). Both against the test bed's stand-in index on 127.0.0.1
(tests/integration/indexes.py), the shipped matrix (matrix/spark-stack.yml), four at a time as the module asks;
the answers must be the same, row for row. Records the figures with the commit in
bench/results/matrix_check_asks.json. Not a test: run it by hand:

    .venv/bin/python bench/matrix_check_asks.py
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
for path in ("bench", "tests/integration", "testbed", "collections"):
    sys.path.insert(0, str(REPO / path))
import pairs  # noqa: E402
import yaml  # noqa: E402
from ansible_collections.sparkfleet.spark.plugins.module_utils.venv._indexes import mirrored  # noqa: E402
from ansible_collections.sparkfleet.spark.plugins.modules.spark_matrix_check import (  # noqa: E402
    ask,
    ask_together,
)
from indexes import Index  # noqa: E402

PIP = [sys.executable, "-m", "pip"]


def children_cpu() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def main() -> int:
    matrix = yaml.safe_load((REPO / "matrix" / "spark-stack.yml").read_text())
    with tempfile.TemporaryDirectory() as work:
        index = Index(Path(work) / "index")
        steps = [(step["packages"], mirrored(step["index_url"], index.overrides)) for step in matrix["steps"]]
        pins = [(spec, url) for specs, url in steps for spec in specs]
        cpu = {"alone": 0.0, "together": 0.0}
        answers = {}

        def alone():
            start = children_cpu()
            with ThreadPoolExecutor(max_workers=4) as pool:
                answers["alone"] = list(pool.map(lambda p: ask(PIP, p[0], p[1], matrix["target"], 20), pins))
            cpu["alone"] += children_cpu() - start

        def together():
            start = children_cpu()
            with ThreadPoolExecutor(max_workers=4) as pool:
                said = list(pool.map(lambda s: ask_together(PIP, s[0], s[1], matrix["target"], 20), steps))
            answers["together"] = [row for rows in said for row in rows]
            cpu["together"] += children_cpu() - start

        found = pairs.interleaved(alone, together, label="pins")
        index.close()
    assert answers["alone"] == answers["together"], "the two ways answered differently"
    found["cpu_s_per_run"] = {way: round(seconds / found["pairs"], 1) for way, seconds in cpu.items()}
    found["pip_runs"] = {"alone": len(pins), "together": len(steps)}
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True,
                            check=False).stdout.strip()
    out = {"what": "the matrix check's pin questions: each step's pins in one pip run, against each pin alone",
           "commit": commit, "pins": len(pins), "steps": len(steps), **found}
    (REPO / "bench" / "results" / "matrix_check_asks.json").write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps({k: v for k, v in out.items() if k != "rows"}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
