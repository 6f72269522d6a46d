"""The probe's exit status, read as the signal that ended it (pure)."""

from __future__ import annotations

import pytest
from ansible_collections.sparkfleet.spark.plugins.module_utils._gpu_probe import killed_by, signal_name


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
