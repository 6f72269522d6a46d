# Copyright: sparkfleet contributors
# Apache License 2.0
"""spark_image_plan in the controller's own process.

The plan reads one small file on the controller and is pure logic over the variables the play already holds (the
catalog): run as a module it would cost a Python process and a module payload on every run, converged or not.

The inventory's variable spark_images_lock (Ansible loads the lock file as it) is read here as the inventory holds
it, never rendered: a task option `inventory_lock: "{{ spark_images_lock }}"` would render every string of a hand
edited lock as a template before any check could refuse it. Given as an option, it is taken as given.
"""

from __future__ import annotations

from ansible.plugins.action import ActionBase
from ansible_collections.sparkfleet.spark.plugins.module_utils.images._lock import (
    PLAN_OPTIONS,
    VARIABLE,
    LockRefused,
    load,
    plan,
)


class ActionModule(ActionBase):
    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        _validation, args = self.validate_argument_spec(argument_spec=PLAN_OPTIONS)
        try:
            inventory_lock = (args["inventory_lock"] if "inventory_lock" in self._task.args
                              else (task_vars or {}).get(VARIABLE))
            lock = load(args["path"], inventory_lock)
            return {**result, **plan(lock, args["images"], args["moving_tags"], args["path"])}
        except LockRefused as exc:
            return {**result, "failed": True, "msg": exc.msg, "problems": exc.problems}
