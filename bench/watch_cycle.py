"""What one `sparkfleet watch` cycle costs beside a plain `sparkfleet verify` of the same inventory, one run,
alternating, figures as ratios within that run.

    .venv/bin/python bench/watch_cycle.py -i INVENTORY [--rounds 3] [--out bench/results/watch_cycle.json]

A cycle (`sparkfleet watch run`) is the verify plus its report written as metrics; the ratio says what the
metrics add. Without -i it uses an inventory of two hosts nothing answers for (127.0.0.1:9): the verify is then
little more than Ansible starting, the worst case for the ratio. On the lab: -i inventory/lab. Not a test: the
machines are noisy; read the ratios, not the seconds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def timed(argv: list[str], cwd: Path) -> float:
    start = time.monotonic()
    subprocess.run([str(BIN / "sparkfleet"), *argv], cwd=cwd, capture_output=True, check=False)
    return time.monotonic() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-i", "--inventory")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        root = Path(work)
        root.chmod(0o755)
        inventory = args.inventory
        if inventory is None:
            inventory = str(root / "inv")
            (root / "inv").mkdir()
            (root / "inv" / "hosts.yml").write_text("all:\n  children:\n    sparks:\n      hosts:\n" + "".join(
                f"        spark-{n}:\n          ansible_host: 127.0.0.1\n          ansible_port: 9\n" for n in (1, 2)))
        verify, cycle = [], []
        for round_ in range(args.rounds):
            verify.append(timed(["verify", "-i", inventory, "--plain", "--report-dir", str(root / f"v{round_}")],
                                root))
            cycle.append(timed(["watch", "run", "-i", inventory, "--textfile-dir", str(root / "tf"), "--state-dir",
                                str(root / "state")], root))
    found = {"inventory": args.inventory or "two unreachable hosts", "rounds": args.rounds,
             "verify_s": [round(v, 2) for v in verify], "cycle_s": [round(c, 2) for c in cycle],
             "ratio_median": round(statistics.median(cycle) / statistics.median(verify), 2),
             "ratio_min": round(min(c / v for c, v in zip(cycle, verify, strict=True)), 2),
             "ratio_max": round(max(c / v for c, v in zip(cycle, verify, strict=True)), 2)}
    print(json.dumps(found, indent=2))
    if args.out:
        args.out.write_text(json.dumps(found, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
