#!/usr/bin/python
# Copyright: sparkfleet contributors
# Apache License 2.0
"""Register the NVIDIA runtime with Docker through nvidia-ctk, only when needed."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: spark_docker_runtime
short_description: Register the NVIDIA container runtime in Docker's daemon.json, only when needed
description:
  - Parses Docker's C(daemon.json) and runs
    C(nvidia-ctk runtime configure --runtime=docker) only when
    C(runtimes.nvidia.path) is missing or wrong (or C(default-runtime) / CDI
    were asked for and are missing). A converged host is never rewritten,
    so Docker is never restarted for nothing.
  - C(nvidia-ctk) rewrites its file non-atomically; this module runs it on a
    copy next to C(daemon.json), checks that every key the user had survived,
    and only then moves the result into place. A malformed C(daemon.json)
    fails with its path and the parse error and is left untouched.
  - In check mode it shows the change C(nvidia-ctk --dry-run) would make; when
    the toolkit is not installed yet it predicts the change from
    C(nvidia-ctk)'s documented behaviour and says so.
  - Only adds C(default-runtime) and C(features.cdi) when asked, never removes
    what the user set.
version_added: "0.1.0"
author: sparkfleet contributors (@sparkfleet)
extends_documentation_fragment: [sparkfleet.spark.sparkfleet_attributes]
options:
  path:
    description: Docker's daemon configuration file.
    type: path
    default: /etc/docker/daemon.json
  runtime_path:
    description:
      - The runtime executable C(nvidia-ctk) registers; C(runtimes.nvidia.path)
        must equal it. Only C(path) is compared (Docker reads C(runtimeArgs),
        C(nvidia-ctk) writes C(args)).
    type: str
    default: nvidia-container-runtime
  set_as_default:
    description:
      - Make C(nvidia) Docker's default runtime (C(--set-as-default)). This
        conflicts with DGX OS packages; leave it off unless you need it.
    type: bool
    default: false
  enable_cdi:
    description: Enable CDI in Docker (C(--cdi.enabled)).
    type: bool
    default: false
  nvidia_ctk:
    description: Name or path of C(nvidia-ctk).
    type: str
    default: nvidia-ctk
attributes:
  check_mode:
    support: full
    details: Shows the change C(nvidia-ctk --dry-run) would make, writes nothing.
  diff_mode:
    support: full
    details: Returns the file before and after.
  idempotent:
    support: full
    details: A registered runtime leaves the file untouched and reports C(changed=false).
notes:
  - Restart Docker after a change (the role does it through a handler).
"""

EXAMPLES = r"""
- name: Register the NVIDIA runtime with Docker
  sparkfleet.spark.spark_docker_runtime:
  notify: Restart docker

- name: Register it and enable CDI
  sparkfleet.spark.spark_docker_runtime:
    enable_cdi: true
"""

RETURN = r"""
gaps:
  description: What was missing before the run; empty on a converged host.
  returned: always
  type: list
  elements: str
  sample: ["runtimes.nvidia is not registered"]
predicted:
  description: True when the change shown in check mode was predicted because C(nvidia-ctk) is not installed yet.
  returned: always
  type: bool
command:
  description: The C(nvidia-ctk) command that was (or, in check mode, would be) run; empty when none was needed.
  returned: always
  type: list
  elements: str
  sample: [nvidia-ctk, runtime, configure, --runtime=docker]
"""

import json
import os
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.sparkfleet.spark.plugins.module_utils.host._docker_daemon import (
    DAEMON_JSON,
    RUNTIME_NAME,
    RUNTIME_PATH,
    DaemonJsonError,
    lost_user_settings,
    parse_daemon_json,
    registration_gaps,
)


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except FileNotFoundError:
        return None


class RuntimeRegistration:
    def __init__(self, module: AnsibleModule) -> None:
        self.module = module
        self.params = module.params

    def ctk_args(self) -> list[str]:
        args = ["runtime", "configure", "--runtime=docker"]
        if self.params["set_as_default"]:
            args.append("--set-as-default")
        if self.params["enable_cdi"]:
            args.append("--cdi.enabled")
        return args

    def predicted(self, config: dict) -> str:
        """nvidia-ctk's documented result, for check mode before the toolkit is installed."""
        new = json.loads(json.dumps(config))
        runtimes = new.get("runtimes") if isinstance(new.get("runtimes"), dict) else {}
        runtimes[RUNTIME_NAME] = {"args": [], "path": self.params["runtime_path"]}
        new["runtimes"] = runtimes
        if self.params["set_as_default"]:
            new["default-runtime"] = RUNTIME_NAME
        if self.params["enable_cdi"]:
            features = new.get("features") if isinstance(new.get("features"), dict) else {}
            features["cdi"] = True
            new["features"] = features
        return json.dumps(new, indent=4, sort_keys=True)

    def run_ctk(self, ctk: str, config_path: str, dry_run: bool) -> str:
        cmd = [ctk, *self.ctk_args(), f"--config={config_path}"] + (["--dry-run"] if dry_run else [])
        rc, out, err = self.module.run_command(cmd, environ_update={"LC_ALL": "C"})
        if rc != 0:
            self.module.fail_json(
                msg=f"nvidia-ctk failed (rc {rc}) configuring {self.params['path']}: "
                    f"{(err or out).strip()}. daemon.json was left untouched.",
                cmd=cmd, rc=rc, stdout=out, stderr=err)
        return out

    def apply(self, ctk: str, before: dict, before_text: str | None) -> str:
        """Run nvidia-ctk on a copy, check it kept the user's keys, then move it into place."""
        path = self.params["path"]
        directory = os.path.dirname(path) or "."
        os.makedirs(directory, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".daemon.json.", dir=directory)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(before_text or "")
            self.run_ctk(ctk, tmp, dry_run=False)
            after_text = _read(tmp) or ""
            after = parse_daemon_json(after_text, f"{tmp} (written by nvidia-ctk)")
            lost = lost_user_settings(before, after)
            if lost:
                self.module.fail_json(
                    msg=f"nvidia-ctk's rewrite of {path} dropped or changed settings you had: "
                        f"{', '.join(lost)}; {path} was left untouched. Register the runtime by hand "
                        f"or report this nvidia-ctk version.")
            gaps = registration_gaps(after, self.params["runtime_path"],
                                     self.params["set_as_default"], self.params["enable_cdi"])
            if gaps:
                self.module.fail_json(
                    msg=f"after nvidia-ctk, {path} still falls short: {'; '.join(gaps)}; "
                        f"{path} was left untouched. Check the toolkit version and runtime_path.")
            if os.path.exists(path):
                stat = os.stat(path)
                os.chmod(tmp, stat.st_mode & 0o7777)
                os.chown(tmp, stat.st_uid, stat.st_gid)
            else:
                os.chmod(tmp, 0o644)
            self.module.atomic_move(tmp, path)
            return after_text
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)

    def run(self) -> dict:
        path = self.params["path"]
        before_text = _read(path)
        try:
            before = parse_daemon_json(before_text, path)
        except DaemonJsonError as exc:
            self.module.fail_json(msg=str(exc))
        gaps = registration_gaps(before, self.params["runtime_path"],
                                 self.params["set_as_default"], self.params["enable_cdi"])
        result = {"changed": False, "gaps": gaps, "predicted": False, "command": []}
        if not gaps:
            return result
        ctk = self.module.get_bin_path(self.params["nvidia_ctk"])
        result["command"] = [self.params["nvidia_ctk"], *self.ctk_args()]
        if self.module.check_mode:
            if ctk is None:
                after_text = self.predicted(before)
                result["predicted"] = True
            else:
                after_text = self.run_ctk(ctk, path, dry_run=True).rstrip("\n")
        else:
            if ctk is None:
                self.module.fail_json(
                    msg=f"nvidia-ctk not found on PATH, so the nvidia runtime cannot be registered in "
                        f"{path} ({'; '.join(gaps)}). Install nvidia-container-toolkit-base first.")
            after_text = self.apply(ctk, before, before_text)
        result["changed"] = True
        result["diff"] = {"before": before_text or "", "after": after_text,
                          "before_header": path, "after_header": path}
        return result


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "default": DAEMON_JSON},
            "runtime_path": {"type": "str", "default": RUNTIME_PATH},
            "set_as_default": {"type": "bool", "default": False},
            "enable_cdi": {"type": "bool", "default": False},
            "nvidia_ctk": {"type": "str", "default": "nvidia-ctk"},
        },
        supports_check_mode=True,
    )
    module.exit_json(**RuntimeRegistration(module).run())


if __name__ == "__main__":
    main()
