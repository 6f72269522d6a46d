# Copyright: sparkfleet contributors
# Apache License 2.0
"""spark_image_plan in the controller's own process.

The plan reads one small file on the controller and is pure logic over the variables the play already holds (the
catalog): run as a module it would cost a Python process and a module payload on every run, converged or not.
"""

from __future__ import annotations

from ansible.plugins.action import ActionBase
from ansible_collections.sparkfleet.spark.plugins.module_utils.images._lock import PLAN_OPTIONS, LockRefused, load, plan


class ActionModule(ActionBase):
    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        _validation, args = self.validate_argument_spec(argument_spec=PLAN_OPTIONS)
        try:
            lock = load(args["path"], args["inventory_lock"])
            return {**result, **plan(lock, args["images"], args["moving_tags"], args["path"])}
        except LockRefused as exc:
            return {**result, "failed": True, "msg": exc.msg, "problems": exc.problems}
