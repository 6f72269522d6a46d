# Copyright: sparkfleet contributors
# Apache License 2.0
"""Each step of the stack matrix as the exact command that installs it (pip or uv), and how it is shown."""

from __future__ import annotations

from ansible_collections.sparkfleet.spark.plugins.module_utils.venv._indexes import mirrored, step_indexes
from ansible_collections.sparkfleet.spark.plugins.module_utils.venv._secrets import redact_url
from ansible_collections.sparkfleet.spark.plugins.module_utils.venv._stack_matrix import installer, venv_steps


def hashes_file(directory: str, step_id: str) -> str:
    """Where a step's --require-hashes requirements are written in the venv."""
    return f"{directory}/hashes-{step_id}.txt"


def pip_steps(matrix, extras: list[dict], index_mirrors: dict, constraints_file: str, lock: dict | None = None,
              hashes_dir: str = "", wheelhouse: str | None = None) -> list[dict]:
    """The pip install commands, in order: [{id, why, indexes, args, env}] (args after `python -m pip install`;
    the indexes reach pip through index_env, never its argv).

    A step marked `hold` runs with the matrix's pins as constraints (`--constraint constraints_file`): it resolves
    its packages' own dependencies, and torch, transformers or any other pin installed before it cannot move.

    With a hash lock, each step installs exactly its locked set (`--require-hashes --no-deps -r
    hashes-<id>.txt`, the file in `hashes_dir`) from the indexes the matrix check resolved it against (its own,
    then the earlier steps'): the sha256 of every file pip takes is the lock's, whichever index serves it.
    With a wheelhouse too (the lock's wheels, fetched once for the fleet by spark_wheelhouse), from it alone:
    `--no-index --find-links WHEELHOUSE`, no index asked.
    """
    steps = []
    tool = "uv" if installer(matrix) else "pip"
    for position, step in enumerate(matrix["steps"]):
        indexes = [mirrored(step["index_url"], index_mirrors)]
        args = [*step.get("args", []), *step["packages"]]
        if step.get("hold"):  # every pin of the matrix held: what the steps before installed cannot move
            args = ["--constraint", constraints_file, *args]
        if lock is not None:
            indexes = step_indexes(step, matrix["steps"][:position], index_mirrors)
            args = ["--require-hashes", "--no-deps", "-r", hashes_file(hashes_dir, step["id"])]
            if wheelhouse:
                indexes, args = [], ["--no-index", "--find-links", wheelhouse, *args]
        # The installer itself is installed by pip (into a venv of its own, beside the venvs).
        steps.append({"id": step["id"], "why": step.get("why", ""), "indexes": indexes, "args": args, "env": {},
                      "tool": "pip" if step.get("installer") else tool, "installer": bool(step.get("installer"))})
    default_index = mirrored(venv_steps(matrix)[-1]["index_url"], index_mirrors)
    for extra in extras:
        # The matrix's pins are held: an extra that wants another torch fails instead of replacing it.
        args = ["--constraint", constraints_file, *extra["args"], extra["requirement"]]
        step = {"id": f"extra:{extra['name']}", "why": extra["says"], "indexes": [default_index], "args": args,
                "env": extra["env"], "tool": tool, "installer": False}
        if extra["index_url"]:
            # Never one pip command over both indexes: pip takes the highest version either offers, so a package
            # of the same name on the matrix's index (PyPI) would win over the one the component table names.
            # The package alone from its own index, then its dependencies from the matrix's index (the package,
            # installed, is not fetched again).
            steps.append({**step, "indexes": [mirrored(extra["index_url"], index_mirrors)],
                          "args": ["--no-deps", *args]})
            step = {**step, "id": f"extra:{extra['name']}:dependencies"}
        steps.append(step)
    return steps


def display(step: dict) -> str:
    """The step as the user would type it."""
    env = " ".join(f"{k}={v}" for k, v in step["env"].items())
    options = ([f"--index-url {redact_url(step['indexes'][0])}"] if step["indexes"] else []) + [
        f"--extra-index-url {redact_url(url)}" for url in step["indexes"][1:]]
    words = " ".join([*options, *(f'"{a}"' if "=" in a or "<" in a or ">" in a else a for a in step["args"])])
    tool = "uv pip" if step.get("tool") == "uv" else "pip"
    return f"{env + ' ' if env else ''}{tool} install {words}"


def platform_tags(target: dict) -> list[str]:
    """pip --platform values for the target: pip matches manylinux_2_N exactly, so every N up to glibc."""
    arch = target["arch"]
    top = int(target["glibc"].split(".")[1])
    return [f"manylinux_2_{n}_{arch}" for n in range(top, 16, -1)] + [f"manylinux2014_{arch}"]
