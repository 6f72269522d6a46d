# Copyright: sparkfleet contributors
# Apache License 2.0
"""spark_image_lock, state=plan, in the controller's own process.

The plan is pure logic over the variables the play already holds (the lock, the catalog): run as a module it
costs a Python process and a module payload on every run, converged or not, for no file it reads. state=write
(the lock file) runs the module as before.
"""

from __future__ import annotations

from ansible.plugins.action import ActionBase
from ansible_collections.sparkfleet.spark.plugins.module_utils._lock import ARGUMENT_SPEC, LockRefused, plan


class ActionModule(ActionBase):
    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        if self._task.args.get("state", "plan") != "plan":
            written = self._execute_module(module_name="sparkfleet.spark.spark_image_lock",
                                           module_args=self._task.args, task_vars=task_vars)
            return {**result, **written}
        _validation, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        try:
            return {**result, **plan(args["lock"], args["images"], args["moving_tags"], args["path"])}
        except LockRefused as exc:
            return {**result, "failed": True, "msg": exc.msg, "problems": exc.problems}
