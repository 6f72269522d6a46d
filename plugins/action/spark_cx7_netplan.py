# Copyright: sparkfleet contributors
# Apache License 2.0
"""spark_cx7_netplan: apply, then reach the node again over a new connection and confirm, in one task per host.

The rollback timer the module arms must be disarmed as soon as Ansible reached the node again. Confirmed by a
handler, it waited for every host of the play to apply first: with more hosts than forks, the first hosts' timers
ran out while the last ones were still applying, and healthy nodes rolled back silently. Here each host is
confirmed by the same worker right after its own change: the connection is reset (an SSH control master
closed), so the confirm goes over a new connection through the management link, as the handler's did.
"""

from __future__ import annotations

from ansible.errors import AnsibleConnectionFailure
from ansible.plugins.action import ActionBase

MODULE = "sparkfleet.spark.spark_cx7_netplan"


class ActionModule(ActionBase):
    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = dict(self._task.args)
        applied = {**result, **self._execute_module(module_name=MODULE, module_args=args, task_vars=task_vars)}
        if (applied.get("failed") or applied.get("unreachable") or not applied.get("rollback_unit")
                or args.get("confirm") or not args.get("confirm_after_apply", True)):
            return applied
        seconds = args.get("rollback_seconds", 120)
        try:
            self._connection.reset()
            confirmed = self._execute_module(module_name=MODULE, task_vars=task_vars,
                                             module_args={"confirm": True, "path": args.get("path") or
                                                          "/etc/netplan/40-cx7.yaml"})
        except AnsibleConnectionFailure as exc:
            confirmed = {"failed": True, "msg": f"could not reach it again: {exc}"}
        if confirmed.get("failed") or confirmed.get("unreachable"):
            applied.update(failed=True, confirmed=False,
                           msg=f"the CX-7 netplan was applied, but the node could not be confirmed over a new "
                               f"connection ({confirmed.get('msg', 'unreachable')}); its rollback timer puts the "
                               f"previous file back within {seconds} s. Check the management link and the rails' "
                               "subnets (spark_clusters), then run again.")
            return applied
        applied.update(confirmed=True, rollback_unit=None)
        return applied
