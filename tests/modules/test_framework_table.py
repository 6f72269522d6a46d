"""The framework table's walk in the quick tier (`make unit`, `make test-quick`; issue 61, item 2): every framework
FRAMEWORKS probes has its case in tests/integration/test_framework_probes.py, whose own tests need the network
(real wheels) and are left out of those tiers. The message says which file to edit and what to add."""

from __future__ import annotations

import test_framework_probes as probes


def test_every_probed_framework_has_a_case():
    missing = sorted(set(probes.PROBED) - set(probes.CASES))
    stale = sorted(set(probes.CASES) - set(probes.PROBED))
    assert not missing, (f"FRAMEWORKS probes {missing} with no case: add each to CASES in {probes.__file__} (its "
                         "venv, stage, error and fix on this machine) and its wheels to tests/integration/wheels.py")
    assert not stale, f"CASES in {probes.__file__} names {stale}, which FRAMEWORKS does not probe: remove them"
