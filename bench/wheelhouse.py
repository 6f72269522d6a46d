"""Benchmark: the wheels a fleet's venv build takes from the indexes, with the controller's wheelhouse (each wheel of
the hash lock fetched once for the fleet, spark_venv_wheelhouse: true) and without it (each host fetches its own),
for 1, 2 and 4 hosts, in one run.

The role spark_venv runs as site.yml runs it, from the lock, on hosts driven locally (each its own venv root, so
its own pip cache: a fleet's hosts, as far as the index can tell), against the test bed's index
(testbed/pyindex.py, its requests counted). The stand-in wheels are small: the figures that carry over to a real
fleet are the counts and the ratios (a real lock's wheels are gigabytes: torch, the stack, bitsandbytes). Records
them with the commit in bench/results/wheelhouse.json. Not a test: run it by hand:

    .venv/bin/python bench/wheelhouse.py
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
for path in ("tests", "tests/integration", "testbed", "collections"):
    sys.path.insert(0, str(REPO / path))
from indexes import Index, venv_fleet  # noqa: E402


def main() -> int:
    rows = []
    for hosts in (1, 2, 4):
        for wheelhouse in (False, True):
            with tempfile.TemporaryDirectory() as work:
                index = Index(Path(work) / "index")
                try:
                    started = time.monotonic()
                    proc, served = venv_fleet(Path(work), index, hosts, wheelhouse)
                    seconds = time.monotonic() - started
                finally:
                    index.close()
            if proc.returncode != 0:
                print(proc.stdout[-3000:], file=sys.stderr)
                return 1
            rows.append({"hosts": hosts, "wheelhouse": wheelhouse, **served, "seconds": round(seconds, 1)})
            print(f"{hosts} host(s), wheelhouse {'on ' if wheelhouse else 'off'}: {served['wheels']:3d} wheels, "
                  f"{served['bytes']:7d} bytes from the index ({served['distinct']} distinct), {seconds:.0f} s")
    for hosts in (1, 2, 4):
        off, on = (next(r for r in rows if r["hosts"] == hosts and r["wheelhouse"] is w) for w in (False, True))
        print(f"{hosts} host(s): the wheelhouse takes {on['bytes'] / off['bytes']:.2f} of the bytes without it")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True,
                            check=False).stdout.strip()
    (REPO / "bench" / "results" / "wheelhouse.json").write_text(json.dumps(
        {"commit": commit, "date": time.strftime("%Y-%m-%d"), "runs": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
