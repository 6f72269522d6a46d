"""bench/pairs.py (issue 60): comparisons timed as interleaved pairs, reported as the median ratio with its spread,
and not published where the spread is too wide."""

from __future__ import annotations

from conftest import bench_module


def _pairs():
    return bench_module("pairs")


def test_the_two_commands_alternate_and_the_median_of_the_pairs_ratios_is_reported(monkeypatch):
    pairs = _pairs()
    calls = []
    # Each pair's seconds: a busy minute falls on the third pair and moves both of its halves.
    seconds = iter([4.0, 5.0, 4.0, 5.2, 8.0, 10.0, 4.0, 4.8, 4.1, 5.0])
    monkeypatch.setattr(pairs, "clock", lambda run: (run(), next(seconds))[1])
    found = pairs.interleaved(lambda: calls.append("A"), lambda: calls.append("B"), pairs=5)
    assert calls == ["A", "B"] * 5
    assert found["ratio"] == 1.25 and found["spread"] == [1.2, 1.3] and "unstable" not in found
    assert (found["baseline_s"], found["measured_s"]) == (4.0, 5.0)


def test_a_spread_wider_than_the_bound_is_not_published_and_says_why():
    pairs = _pairs()
    rows = [{"baseline_s": 4.0, "measured_s": m, "ratio": m / 4.0} for m in (4.4, 4.8, 9.6, 4.6, 4.4)]
    found = pairs.summarize(rows)
    assert found["ratio"] is None and found["spread"] == [1.1, 2.4]
    assert found["unstable"].startswith("spread 1.1-2.4 is 113% of the median 1.15, wider than 50%: not published")


def test_the_fleets_least_ratio_counts_the_work_of_every_core_and_not_its_idle_time(monkeypatch):
    """bench/fleet.py sets the converged fleet's wall time beside the least its CPU-seconds allow on this machine's
    cores: the CPU-seconds are /proc/stat's user, nice, system, irq and softirq, never idle, iowait or steal."""
    import os
    import time

    from conftest import REPO

    monkeypatch.syspath_prepend(str(REPO / "bench"))
    fleet = bench_module("fleet")
    hz = os.sysconf("SC_CLK_TCK")
    # cpu  user nice system idle iowait irq softirq steal guest guest_nice (proc(5)), in clock ticks.
    line = f"cpu  {3 * hz} {1 * hz} {2 * hz} {50 * hz} {7 * hz} {hz // 2} {hz // 2} {9 * hz} {3 * hz} 0\ncpu0 1 2 3\n"
    assert fleet.cpu_seconds(line) == 7.0
    # Live: a second of one core spinning here is counted, whatever else the machine does at the time.
    spent: list[float] = []
    end = time.monotonic() + 1.0
    fleet.with_cpu(lambda: [None for _ in iter(lambda: time.monotonic() < end, False)], spent)()
    assert spent[0] >= 0.8, spent
