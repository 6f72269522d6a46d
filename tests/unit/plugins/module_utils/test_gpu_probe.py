"""The probe's exit status, read as the signal that ended it (pure)."""

from __future__ import annotations

import pytest
from ansible_collections.sparkfleet.spark.plugins.module_utils._gpu_probe import diagnose, killed_by, signal_name


@pytest.mark.parametrize(("rc", "container", "signal"), [
    (-11, False, 11),   # the interpreter itself, ended by SIGSEGV
    (-6, True, 6),      # a launcher that exec'd into something a signal ended
    (139, True, 11),    # docker run: the container's process ended by SIGSEGV
    (139, False, None),  # an interpreter's own exit status 139 is just a status
    (125, True, None),  # docker run could not start the container
    (1, True, None),
    (0, False, None),
    (None, True, None),  # hung
])
def test_which_signal_ended_the_probe(rc, container, signal):
    assert killed_by(rc, container) == signal


def test_signal_names_are_the_ones_users_see():
    assert signal_name(11) == "SIGSEGV (signal 11)"
    assert signal_name(99) == "signal 99"


def _ok_probe(installed):
    return {"env": {"nvidia_smi": {"found": True, "rc": 0}, "devices": [{"path": "/dev/nvidia0", "access": True}]},
            "frameworks": {"probed": ["torch"], "installed": installed},
            "torch": {"imported": True, "version": "2.14.1", "cuda": "13.0"},
            "cuda": {"available": True, "line": "True 13.0"},
            "device": {"name": "NVIDIA GB10", "capability": [12, 1], "compute": True}}


def test_a_verified_line_says_which_frameworks_it_did_not_probe():
    jax = {"framework": "jax", "distributions": ["jax-cuda13-plugin 0.12.0.1"]}
    result = diagnose(_ok_probe([jax]))
    assert result["verdict"] == "ok"
    assert result["frameworks"] == {"probed": ["torch"], "not_probed": [jax]}
    assert result["notes"] == ["probed torch only; installed, not probed: jax (jax-cuda13-plugin 0.12.0.1)"]


def test_torch_alone_adds_no_note_and_an_old_probe_says_it_cannot_tell():
    assert diagnose(_ok_probe([]))["notes"] == []
    old = _ok_probe([])
    del old["frameworks"]
    assert diagnose(old)["frameworks"] == {"probed": ["torch"], "not_probed": None}
