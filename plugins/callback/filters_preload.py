# Copyright: sparkfleet contributors
# Apache License 2.0
"""Load the collection's Jinja filters once, in the controller's main process, before any task runs."""

from __future__ import annotations

DOCUMENTATION = r"""
---
name: filters_preload
type: aggregate
short_description: Load sparkfleet's filters once per run instead of once per task
description:
  - Ansible runs each task of each host in a worker process forked from the controller's main process, and a
    worker loads the filters the task's templates use. The first filter of a collection it asks for costs the
    loading of all of the collection's filter plugins, about 70 ms on a 2-core machine. For sparkfleet, whose
    tasks plan on the controller with its filters, that was most of a converged run (issue 49).
  - This callback loads them in the main process when the playbook starts; every worker forked after it inherits
    them. It changes nothing else and prints nothing (with C(-vvv), how many filters it loaded).
  - Enabled by the repository's C(ansible.cfg) and by the C(sparkfleet) CLI; with an C(ansible.cfg) of your own,
    add C(sparkfleet.spark.filters_preload) to C(callbacks_enabled) in C([defaults]).
version_added: "0.2.0"
author: sparkfleet contributors (@sparkfleet)
requirements:
  - enable it in C(callbacks_enabled) (C(ANSIBLE_CALLBACKS_ENABLED))
"""

import importlib
import pkgutil

from ansible.plugins.callback import CallbackBase
from ansible.plugins.loader import filter_loader

COLLECTION = "sparkfleet.spark"
FILTERS = "ansible_collections.sparkfleet.spark.plugins.filter"


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "sparkfleet.spark.filters_preload"
    CALLBACK_NEEDS_ENABLED = True

    def v2_playbook_on_start(self, playbook):
        names = []
        package = importlib.import_module(FILTERS)
        for found in pkgutil.iter_modules(package.__path__):
            module = importlib.import_module(f"{FILTERS}.{found.name}")
            if hasattr(module, "FilterModule"):
                names += list(module.FilterModule().filters())
        # Through Ansible's own loader, as a template asks for them: its cache is what a forked worker inherits.
        loaded = [name for name in names if filter_loader.get(f"{COLLECTION}.{name}") is not None]
        self._display.vvv(f"sparkfleet.spark.filters_preload: {len(loaded)} of {len(names)} filters loaded once, "
                          "for every task")
