"""Where `make test`'s time went: the table CI's log ends with (issue 37).

Reads what the run wrote under SPARKFLEET_TIMINGS (default .cache/timings): stages.tsv (testbed/timed.sh: the
venv, lint, each part of the test bed, pytest, each Molecule scenario, each with the share of the machine's cores
that worked while it ran; a line without that share, as timed.sh wrote before, shows none) and pytest.json
(tests/conftest.py: each test file's wall time in the worker that ran it, its CPU-seconds, and ansible-test's sanity
per ansible-core). Prints the table and writes it beside them as table.md; bench/results/suite-timings.md keeps the
last clean clone's. Fails (exit 1), naming it, when a test file used more than a third over the CPU-seconds
bench/cpu_budgets.json states for it (issue 71): a slow test is found the day it lands.

    python bench/suite_timings.py [FOLDER]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

BUDGETS = Path(__file__).with_name("cpu_budgets.json")


def budget_of(path: str, budgets: dict) -> float:
    return budgets["files"].get(path, budgets["default"])


def over_budget(files: dict, budgets: dict) -> list[str]:
    """Each test file whose CPU-seconds exceed its stated budget by more than a third, with both figures."""
    return [f"{path}: {span['cpu_s']:.0f} CPU-s, more than a third over its budget of {budget_of(path, budgets):.0f} "
            f"({BUDGETS.parent.name}/{BUDGETS.name}); find what it now does twice, or state a new budget with why"
            for path, span in sorted(files.items())
            if "cpu_s" in span and span["cpu_s"] > budget_of(path, budgets) * 4 / 3]


def table(folder: Path, budgets: dict | None = None) -> list[str]:
    stages = []
    tsv = folder / "stages.tsv"
    busy: dict[str, str] = {}
    for line in tsv.read_text().splitlines() if tsv.is_file() else []:
        stage, seconds, rc, *cpu = line.split("\t")
        stages.append((stage, float(seconds), int(rc)))
        busy[stage] = f"{cpu[0]}%" if cpu else ""
    found = json.loads((folder / "pytest.json").read_text()) if (folder / "pytest.json").is_file() else {}
    files, tests = found.get("files") or {}, found.get("tests") or {}
    # A part of a stage that ran beside others ("+ molecule: default", testbed/molecule.sh) is shown under it and
    # left out of the sum: the stage is timed whole.
    total = sum(seconds for stage, seconds, _rc in stages if not stage.startswith("+ "))
    out = ["| where | seconds | share | CPU busy |", "|---|---:|---:|---:|"]
    parts = [s for s in stages if s[0].startswith("+ ")]
    for stage, seconds, rc in stages:
        if stage.startswith("+ "):
            continue
        out.append(f"| {stage}{'' if rc == 0 else f' (exit {rc})'} | {seconds:.0f} | "
                   f"{seconds / total:.0%} | {busy[stage]} |" if total else f"| {stage} | {seconds:.0f} | | |")
        if stage.startswith("molecule"):
            out += [f"| &nbsp;&nbsp;{part[2:]}{'' if code == 0 else f' (exit {code})'} | {took:.0f} | | |"
                    for part, took, code in parts]
        if stage == "pytest":
            def cpu(path: str, span: dict) -> str:
                if "cpu_s" not in span:
                    return ""
                return f" (CPU {span['cpu_s']:.0f} s" + (
                    f" of {budget_of(path, budgets):.0f}" if budgets else "") + ")"

            for path, span in sorted(files.items(), key=lambda item: (item[1]["worker"], item[1]["start"])):
                if span["seconds"] >= 10:
                    out.append(f"| &nbsp;&nbsp;{span['worker']}: {path}{cpu(path, span)} | {span['seconds']:.0f} | | |")
            quick = [s for s in files.values() if s["seconds"] < 10]
            if quick:
                used = sum(s.get("cpu_s", 0) for s in quick)
                said = f" (CPU {used:.0f} s)" if used else ""
                out.append(f"| &nbsp;&nbsp;{len(quick)} files under 10 s each{said} | "
                           f"{sum(s['seconds'] for s in quick):.0f} | | |")
            for nodeid, seconds in sorted(tests.items()):
                out.append(f"| &nbsp;&nbsp;&nbsp;&nbsp;{nodeid.split('::', 1)[1]} | {seconds:.0f} | | |")
    out.append(f"| **all stages** | **{total:.0f}** | | |")
    return out


def stale_benchmarks(results: Path, key: str) -> list[str]:
    """A note for each benchmark of bench/results measured on other roles and plugins than these (issue 49)."""
    notes = []
    fleet = results / "fleet.json"
    run = (json.loads(fleet.read_text()).get("run") or {}) if fleet.is_file() else {}
    if run and run.get("content_key") != key:
        measured = (f"measured at {str(run.get('commit'))[:12]} on {run.get('measured_at')}, on roles/ and plugins/ "
                    f"whose content key was {run['content_key']}" if run.get("content_key") else
                    f"measured at {str(run.get('commit'))[:12]} on {run.get('measured_at')}, before content keys")
        notes.append(f"note: {fleet.relative_to(results.parents[1])} is stale: {measured}; they are {key} now. "
                     f"Re-measure the converged run: python bench/fleet.py --only noop")
    return notes


def main() -> int:
    folder = Path(sys.argv[1] if len(sys.argv) > 1 else ".cache/timings")
    repo = Path(__file__).resolve().parents[1]
    sys.path.insert(0, str(repo / "bench"))
    from content_key import content_key

    budgets = json.loads(BUDGETS.read_text())
    lines = ["where make test's time went (wall seconds; a pytest file's in its worker, both workers at once, with the"
             " CPU-seconds of its processes of those its budget allows; CPU busy: the share of all cores that worked"
             " while the stage ran):",
             "", *table(folder, budgets)]
    notes = stale_benchmarks(repo / "bench" / "results", content_key(repo))
    lines += ["", *notes] if notes else []
    found = json.loads((folder / "pytest.json").read_text()) if (folder / "pytest.json").is_file() else {}
    over = over_budget(found.get("files") or {}, budgets)
    if over:
        lines += ["", f"{len(over)} test file(s) over their CPU budget by more than a third (the run fails):",
                  *[f"  {line}" for line in over]]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "table.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 1 if over else 0


if __name__ == "__main__":
    raise SystemExit(main())
