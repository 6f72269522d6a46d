# Copyright: sparkfleet contributors
# Apache License 2.0
"""Pure logic for Docker's daemon.json and the NVIDIA runtime registration.

Decides whether `nvidia-ctk runtime configure` must run, and checks that what
it wrote kept everything the user had. No file or command access here.
"""

from __future__ import annotations

import json
from typing import Any

RUNTIME_NAME = "nvidia"
# The runtime binary nvidia-ctk registers (spark_docker_runtime's runtime_path default).
RUNTIME_PATH = "nvidia-container-runtime"
# Docker's configuration file where the runtime is registered.
DAEMON_JSON = "/etc/docker/daemon.json"
# The keys of daemon.json the registration reads and nvidia-ctk may add or change.
REGISTRATION_KEYS = ("runtimes", "default-runtime", "features")


class DaemonJsonError(ValueError):
    """daemon.json cannot be used as it is; the message says why."""


def parse_daemon_json(text: str | None, path: str) -> dict[str, Any]:
    """Parse daemon.json; a missing or empty file is {} (dockerd's own reading)."""
    if text is None or not text.strip():
        return {}
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise DaemonJsonError(f"{path} is not valid JSON ({exc}); it was left untouched. "
                              f"Fix or remove the file, then run again.") from exc
    if not isinstance(data, dict):
        raise DaemonJsonError(f"{path} holds a JSON {type(data).__name__}, expected an object "
                              f"({{...}}); it was left untouched. Fix the file, then run again.")
    return data


def registration_gaps(config: dict[str, Any], runtime_path: str, set_as_default: bool,
                      enable_cdi: bool) -> list[str]:
    """What is missing for the wanted registration; empty when nothing needs doing.

    Docker reads `runtimeArgs`, nvidia-ctk writes `args`: only `path` decides.
    default-runtime and CDI are only ever added when asked, never removed.
    """
    gaps: list[str] = []
    runtimes = config.get("runtimes")
    runtime = runtimes.get(RUNTIME_NAME) if isinstance(runtimes, dict) else None
    current = runtime.get("path") if isinstance(runtime, dict) else None
    if current is None:
        gaps.append(f"runtimes.{RUNTIME_NAME} is not registered")
    elif current != runtime_path:
        gaps.append(f"runtimes.{RUNTIME_NAME}.path is {current!r}, expected {runtime_path!r}")
    if set_as_default and config.get("default-runtime") != RUNTIME_NAME:
        gaps.append(f"default-runtime is {config.get('default-runtime')!r}, asked for {RUNTIME_NAME!r}")
    features = config.get("features")
    if enable_cdi and not (isinstance(features, dict) and features.get("cdi") is True):
        gaps.append("features.cdi is not enabled, asked for it")
    return gaps


# Keys nvidia-ctk may add or change; every other key must come back as it was.
_CTK_KEYS = frozenset(REGISTRATION_KEYS)


def lost_user_settings(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """Keys (or other runtimes / features) the user had that a rewrite dropped or changed."""
    lost = [key for key in before if key not in _CTK_KEYS and before[key] != after.get(key)]
    for key in ("runtimes", "features"):
        old, new = before.get(key), after.get(key)
        if isinstance(old, dict):
            new = new if isinstance(new, dict) else {}
            lost += [f"{key}.{name}" for name in old
                     if not (key == "runtimes" and name == RUNTIME_NAME)
                     and not (key == "features" and name == "cdi")
                     and old[name] != new.get(name)]
    if "default-runtime" in before and before["default-runtime"] != after.get("default-runtime") \
            and after.get("default-runtime") != RUNTIME_NAME:
        lost.append("default-runtime")
    return lost
