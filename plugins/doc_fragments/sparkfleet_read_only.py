# Copyright: sparkfleet contributors
# Apache License 2.0
"""The attributes' support of a module that only reads: check mode runs it as it is, and it changes nothing (what each
attribute means is sparkfleet_attributes', which every module extends)."""


class ModuleDocFragment:
    DOCUMENTATION = r"""
attributes:
  check_mode:
    support: full
    details: Only reads, the same in check mode.
  diff_mode:
    support: none
  idempotent:
    support: full
    details: Changes nothing.
"""
