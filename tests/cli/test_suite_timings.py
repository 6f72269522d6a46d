"""bench/suite_timings.py: the table CI's log ends with (issue 37). Molecule's scenarios run at once
(testbed/molecule.sh): each is shown under the stage that ran them, and the sum counts the stage, not its parts."""

from __future__ import annotations

from conftest import REPO, bench_module


def test_scenarios_run_at_once_are_shown_under_their_stage_and_counted_once(tmp_path):
    suite_timings = _suite_timings()
    # a line as timed.sh wrote before it measured the CPU (no fourth field) beside today's lines
    stages = [("lint: ruff", "10.0", "0"), ("+ molecule: venv", "250.2", "0", "51"),
              ("+ molecule: default", "280.4", "1", "48"), ("molecule: default and venv, at once", "290.0", "1", "97")]
    (tmp_path / "stages.tsv").write_text("".join("\t".join(s) + "\n" for s in stages))
    rows = suite_timings.table(tmp_path)
    assert rows[2:] == ["| lint: ruff | 10 | 3% |  |",
                        "| molecule: default and venv, at once (exit 1) | 290 | 97% | 97% |",
                        "| &nbsp;&nbsp;molecule: venv | 250 | | |",
                        "| &nbsp;&nbsp;molecule: default (exit 1) | 280 | | |",
                        "| **all stages** | **300** | | |"]


def test_timed_sh_says_how_busy_the_cpu_was_while_a_stage_ran(tmp_path):
    """testbed/timed.sh's fourth field: near 100 % for a stage that keeps every core working (a share of idle time,
    or of one core, would be far under it). A stage that waits is judged only against it: the rest of the suite
    runs beside this test and keeps the cores busy while it sleeps."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "SPARKFLEET_TIMINGS": str(tmp_path)}
    spin = "import multiprocessing as m, time\ndef f(_):\n t = time.time()\n while time.time() - t < 2: pass\n" \
           "if __name__ == '__main__':\n with m.Pool(os.cpu_count()) as p: p.map(f, range(os.cpu_count()))\n"
    subprocess.run([str(REPO / "testbed" / "timed.sh"), "waits", "sleep", "2"], env=env, check=True)
    subprocess.run([str(REPO / "testbed" / "timed.sh"), "works", sys.executable, "-c", "import os\n" + spin],
                   env=env, check=True)
    lines = [line.split("\t") for line in (tmp_path / "stages.tsv").read_text().splitlines()]
    assert [(stage, rc) for stage, _s, rc, _cpu in lines] == [("waits", "0"), ("works", "0")]
    waits, works = (int(cpu) for *_rest, cpu in lines)
    assert works >= 80 and 0 <= waits <= works, lines


def _suite_timings():
    return bench_module("suite_timings")


def test_a_benchmark_measured_on_other_roles_and_plugins_is_named_stale(tmp_path):
    """Issue 49: the converged run's figures (bench/results/fleet.json) say which roles/ and plugins/ they were
    measured on; the timing table names them stale when those differ, and says how to re-measure."""
    import json

    results = tmp_path / "bench" / "results"
    results.mkdir(parents=True)
    run = {"commit": "e42ed1701c50f4462fa2745d8dd727a4724a9cb0", "measured_at": "2026-12-02T16:58:35Z"}
    (results / "fleet.json").write_text(json.dumps({"run": {**run, "content_key": "0123456789abcdef"}}))
    assert _suite_timings().stale_benchmarks(results, "0123456789abcdef") == []
    [note] = _suite_timings().stale_benchmarks(results, "fedcba9876543210")
    assert note == ("note: bench/results/fleet.json is stale: measured at e42ed1701c50 on 2026-12-02T16:58:35Z, on "
                    "roles/ and plugins/ whose content key was 0123456789abcdef; they are fedcba9876543210 now. "
                    "Re-measure the converged run: python bench/fleet.py --only noop")
    (results / "fleet.json").write_text(json.dumps({"run": run}))
    [note] = _suite_timings().stale_benchmarks(results, "fedcba9876543210")
    assert "before content keys" in note


def test_the_content_key_follows_the_roles_and_plugins_bytes(tmp_path):
    import subprocess
    import sys

    sys.path.insert(0, str(REPO / "bench"))
    from content_key import content_key

    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "roles").mkdir()
    (tmp_path / "roles" / "main.yml").write_text("a: 1\n")
    (tmp_path / "README.md").write_text("x\n")
    subprocess.run(["git", "-C", str(tmp_path), "add", "."], check=True)
    first = content_key(tmp_path)
    (tmp_path / "README.md").write_text("y\n")
    assert content_key(tmp_path) == first, "only roles/ and plugins/ count"
    (tmp_path / "roles" / "main.yml").write_text("a: 2\n")
    assert content_key(tmp_path) != first


def test_a_file_more_than_a_third_over_its_cpu_budget_fails_the_run_and_is_named(tmp_path):
    """Issue 71: each test file's CPU-seconds (tests/conftest.py) against the budget bench/cpu_budgets.json states
    for it, or its default: within a third over passes, beyond fails the table's run (exit 1) naming the file and
    both figures; the table shows each file's CPU beside its budget."""
    import json

    suite_timings = _suite_timings()
    budgets = {"default": 30, "files": {"tests/fleet/test_fleet.py": 900}}
    files = {"tests/fleet/test_fleet.py": {"worker": "gw0", "start": 0, "stop": 1000, "seconds": 1000, "cpu_s": 1190},
             "tests/cli/test_cli.py": {"worker": "gw1", "start": 0, "stop": 12, "seconds": 12, "cpu_s": 41},
             "tests/cli/test_old.py": {"worker": "gw1", "start": 12, "stop": 14, "seconds": 2}}
    [over] = suite_timings.over_budget(files, budgets)
    assert over.startswith("tests/cli/test_cli.py: 41 CPU-s, more than a third over its budget of 30 "
                           "(bench/cpu_budgets.json)"), over
    files["tests/fleet/test_fleet.py"]["cpu_s"] = 1201
    assert [line.split(":")[0] for line in suite_timings.over_budget(files, budgets)] == [
        "tests/cli/test_cli.py", "tests/fleet/test_fleet.py"]
    (tmp_path / "pytest.json").write_text(json.dumps({"files": files, "tests": {}}))
    (tmp_path / "stages.tsv").write_text("pytest\t1000.0\t0\t90\n")
    rows = suite_timings.table(tmp_path, budgets)
    assert "| &nbsp;&nbsp;gw0: tests/fleet/test_fleet.py (CPU 1201 s of 900) | 1000 | | |" in rows, rows
    assert "| &nbsp;&nbsp;gw1: tests/cli/test_cli.py (CPU 41 s of 30) | 12 | | |" in rows, rows


def test_every_budget_names_a_test_file_that_is_there():
    import json

    budgets = json.loads((REPO / "bench" / "cpu_budgets.json").read_text())
    assert budgets["default"] > 0
    assert [path for path in budgets["files"] if not (REPO / path).is_file()] == []


def test_a_tests_cpu_seconds_reach_the_timings_with_its_childrens(tmp_path):
    """What tests/conftest.py adds up for a file: a test that spins a child process for a second is counted a
    second or more, whichever worker ran it (the reports carry it to where they meet)."""
    import json
    import os
    import subprocess
    import sys

    (tmp_path / "test_spin.py").write_text(
        "import subprocess, sys\n"
        "def test_spin():\n"
        "    subprocess.run([sys.executable, '-c', 'import time\\nt = time.process_time()\\n"
        "while time.process_time() - t < 1: pass'], check=True)\n")
    # tests/conftest.py loaded as a plugin, as pytest loads it for the files beside it
    # (its own session: not one of this run's xdist workers, which leave the writing to their controller)
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")},
           "SPARKFLEET_TIMINGS": str(tmp_path / "timings"), "PYTHONPATH": str(REPO / "tests")}
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "conftest", "-n", "1",
                    "-c", os.devnull, "--rootdir", str(tmp_path), "test_spin.py"],
                   cwd=tmp_path, env=env, check=True, capture_output=True)
    [span] = json.loads((tmp_path / "timings" / "pytest.json").read_text())["files"].values()
    assert 1.0 <= span["cpu_s"] < 10, span
