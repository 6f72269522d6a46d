"""What probing every GPU framework costs against the torch-only probe, and what the smoke step costs, in one run.

Runs the probe program (plugins/module_utils/verification/_program_gpu_probe.py) under an interpreter that holds GPU
frameworks, without and with --frameworks, and the smoke step under one that holds the training stack; each
several times, the median kept. On a machine without a GPU (this project's CI and developers' machines) the
frameworks fail fast at their device stage, so the figure is the floor (imports and device discovery); on a GPU
machine it includes each framework's first GPU operation (tests/gpu/run.sh).

    python bench/probe_frameworks.py FRAMEWORKS_PYTHON SMOKE_PYTHON [OUT.json]

The test suite builds both interpreters under .cache/tests (tests/integration/wheels.py: frameworks_venv,
smoke_venv). Figures go to bench/results/probe_frameworks.json.
"""

from __future__ import annotations

import datetime
import json
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# module_utils as the collection sparkfleet.spark (collections/ansible_collections/sparkfleet/spark links here): the
# programs as the modules send them.
sys.path.insert(0, str(REPO / "collections"))
from ansible_collections.sparkfleet.spark.plugins.module_utils.verification._gpu_probe import PROBE  # noqa: E402
from ansible_collections.sparkfleet.spark.plugins.module_utils.verification._smoke import SMOKE  # noqa: E402

RUNS = 5


def timed(python: str, program: str, *args: str) -> tuple[float, str]:
    started = time.perf_counter()
    proc = subprocess.run([python, "-", *args], input=program, capture_output=True, text=True, check=False,
                          timeout=900)
    return time.perf_counter() - started, proc.stdout


def median(python: str, program: str, *args: str) -> tuple[float, str]:
    runs = [timed(python, program, *args) for _ in range(RUNS)]
    return statistics.median(t for t, _ in runs), runs[-1][1]


def main(argv: list[str]) -> int:
    frameworks_python, smoke_python = argv[1], argv[2]
    out = Path(argv[3]) if len(argv) > 3 else REPO / "bench" / "results" / "probe_frameworks.json"
    torch_only, _ = median(frameworks_python, PROBE)
    every, lines = median(frameworks_python, PROBE, "--frameworks")
    probed = [json.loads(line) for line in lines.splitlines() if line.startswith('{"name"') and '"verdict"' in line]
    smoke, smoke_lines = median(smoke_python, SMOKE)
    verdict = json.loads(smoke_lines.splitlines()[-1])
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True,
                            check=False).stdout.strip()
    result = {
        "commit": commit, "when": datetime.datetime.now(datetime.UTC).replace(microsecond=0).isoformat(),
        "machine": f"{platform.machine()}, {platform.python_version()} bench driver, no GPU unless said",
        "runs_each": RUNS,
        "probe_torch_only_s": round(torch_only, 3),
        "probe_every_framework_s": round(every, 3),
        "ratio_every_framework_to_torch_only": round(every / torch_only, 2),
        "frameworks": [{k: p.get(k) for k in ("name", "verdict", "stage", "seconds")} for p in probed],
        "smoke_s": round(smoke, 3),
        "smoke": {k: verdict.get(k) for k in ("verdict", "stage", "device", "steps", "seconds_per_step",
                                              "first_loss", "last_loss", "drop")},
        "ratio_smoke_to_torch_only_probe": round(smoke / torch_only, 2),
    }
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
