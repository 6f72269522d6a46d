# Copyright: sparkfleet contributors
# Apache License 2.0
"""The attributes of a module that only reads: check mode runs it as it is, and it changes nothing."""


class ModuleDocFragment:
    DOCUMENTATION = r"""
attributes:
  check_mode:
    description: Can run in check_mode and return changed status prediction without modifying target.
    support: full
    details: Only reads, the same in check mode.
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in check_mode), when in
      diff mode.
    support: none
  idempotent:
    description: When run twice in a row outside check mode, with the same arguments, the second invocation
      indicates no change.
    support: full
    details: Changes nothing.
"""
