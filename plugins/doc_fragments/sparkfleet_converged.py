# Copyright: sparkfleet contributors
# Apache License 2.0
"""The option of a module whose converged run is recorded, so that the next run can skip it
(module_utils/host/_converged.py)."""


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  converged_key:
    description:
      - The sha256 of this call's arguments, computed on the controller. Given, a run that succeeds records it
        with the result a converged re-run returns and the stat of the files that hold the state it made, in
        C(/var/lib/sparkfleet/converged/); spark_preflight_facts returns the record while those files are as
        the run left it (a day at most), and the role skips the module where this run's key is the recorded
        one. Any run outside check mode removes the record first, so a failed run leaves none.
    type: str
"""
