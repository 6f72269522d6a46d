"""spark_dpkg_missing: what still needs apt, from dpkg-query's own lines (act only where there is drift)."""

from __future__ import annotations

import subprocess

import pytest
from ansible_collections.sparkfleet.spark.plugins.filter import sparkfleet_packages as packages

missing = packages.spark_dpkg_missing

TOOLKIT = ["nvidia-container-toolkit", "nvidia-container-toolkit-base"]


def test_held_and_installed_both_count_at_the_pinned_version():
    lines = ["nvidia-container-toolkit 1.18.0-1 hi ", "nvidia-container-toolkit-base 1.18.0-1 ii "]
    assert missing(lines, TOOLKIT, "1.18.0-1") == []
    assert missing(lines, TOOLKIT, "1.17.8-1") == TOOLKIT, "another version is drift"
    assert missing(lines, TOOLKIT, None, ["hi"]) == ["nvidia-container-toolkit-base"], "not held yet"


@pytest.mark.parametrize("status", ["un ", "rc ", "iU ", "iF ", "hiR"])
def test_half_installed_removed_or_broken_packages_still_need_apt(status):
    assert missing([f"nvidia-container-toolkit 1.18.0-1 {status}"], TOOLKIT[:1], "1.18.0-1") == TOOLKIT[:1]


def test_on_this_machines_real_dpkg():
    """The lines as the role asks dpkg for them, for packages this Debian has and one it does not."""
    proc = subprocess.run(["dpkg-query", "--show", "--showformat=${Package} ${Version} ${db:Status-Abbrev}\n",
                           "dpkg", "coreutils", "sparkfleet-no-such-package"],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 1, "dpkg-query says 1 when one package is unknown (the role allows it)"
    assert missing(proc.stdout.splitlines(), ["dpkg", "coreutils", "sparkfleet-no-such-package"]) == [
        "sparkfleet-no-such-package"]
