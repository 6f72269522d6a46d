"""The test bed's stand-in package index (testbed/pyindex.py) served on 127.0.0.1 for one test module.

Every request is recorded, so a test can count what pip fetched.
"""

from __future__ import annotations

import threading
from pathlib import Path

from pyindex import packages, server


class Index:
    def __init__(self, root: Path):
        self.root = root
        packages(root)
        self.requests: list[str] = []
        self.server = server(root, 0, self.requests)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def overrides(self) -> dict[str, str]:
        return {"https://pypi.org/simple": f"{self.url}/pypi",
                "https://download.pytorch.org/whl/cu130": f"{self.url}/cu130"}

    def wheels_fetched(self) -> list[str]:
        return sorted(p.rsplit("/", 1)[-1] for p in self.requests if p.endswith(".whl"))

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def here(matrix: dict) -> dict:
    """The matrix retargeted at this machine (x86_64, Debian 12's glibc, this Python): what a lock must be for
    when its hosts are this machine, as the installer's wheel (uv, a real program) is one per architecture."""
    import sys

    return {**matrix, "target": {"python": f"{sys.version_info[0]}.{sys.version_info[1]}", "arch": "x86_64",
                                 "glibc": "2.36"}}


def venv_fleet(workdir: Path, index: Index, hosts: int, wheelhouse: bool, own: dict | None = None,
               locked: bool = True, edit=None):
    """The role spark_venv run as site.yml runs it, from the hash lock, on `hosts` hosts driven locally (each its
    own venv root and link on this machine: a fleet's hosts, as far as the indexes can tell), through
    ansible-playbook. Returns (the process, how many wheels and bytes the index served during the run).

    The matrix is the real one retargeted at this machine (the test bed's stand-ins are pure Python), its lock
    written by the matrix check against the index; the hosts are simulated (their torch is the test bed's double,
    so the other GPU frameworks are not exercised, as on a lab host). `own`: host name -> its host_vars.
    `locked` false: no lock, the venv built from the indexes; `edit`: changes the matrix (in place) first."""
    import subprocess
    import sys

    import yaml
    from ansible_collections.sparkfleet.spark.plugins.module_utils.venv._hash_lock import lock_from_sequence

    from conftest import BIN, REPO, ansible_env, run_module

    matrix = here(yaml.safe_load((REPO / "matrix" / "spark-stack.yml").read_text()))
    if edit is not None:
        edit(matrix)
    (workdir / "matrix.yml").write_text(yaml.safe_dump(matrix))
    inventory = workdir / "inventory"
    (inventory / "group_vars" / "all").mkdir(parents=True, exist_ok=True)
    if locked:
        checked = run_module("spark_matrix_check", {"matrix": matrix, "index_mirrors": index.overrides})
        (inventory / "group_vars" / "all" / "spark_venv_lock.yml").write_text(yaml.safe_dump(
            {"spark_venv_lock": lock_from_sequence(matrix, checked["sequence"])}))
    names = {f"venv-host-{n}": {"spark_venv_root": str(workdir / f"host-{n}" / "venvs"),
                                "spark_venv_link": str(workdir / f"host-{n}" / "venv"),
                                **(own or {}).get(f"venv-host-{n}", {})} for n in range(1, hosts + 1)}
    (inventory / "hosts.yml").write_text(yaml.safe_dump({"all": {"children": {"sparks": {"hosts": names}}, "vars": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable,
        "spark_preflight_require_spark": False, "spark_preflight_simulated": True,
        "spark_venv_enabled": True, "spark_venv_require_hashes": locked, "spark_venv_python": sys.executable,
        "spark_venv_matrix_file": str(workdir / "matrix.yml"), "spark_venv_index_mirrors": index.overrides,
        "spark_venv_wheelhouse": wheelhouse, "spark_venv_wheelhouse_cache": str(workdir / "controller-cache")}}}))
    play = workdir / "venv.yml"
    play.write_text(yaml.safe_dump([{"hosts": "sparks", "gather_facts": False, "tasks": [
        {"ansible.builtin.include_role": {"name": "sparkfleet.spark.spark_preflight", "tasks_from": "facts"}},
        {"ansible.builtin.include_role": {"name": "sparkfleet.spark.spark_venv"}}]}]))
    before = len(index.requests)
    proc = subprocess.run([str(BIN / "ansible-playbook"), "-i", str(inventory), str(play)], cwd=REPO,
                          capture_output=True, text=True, check=False, env=ansible_env())
    served = [p for p in index.requests[before:] if p.endswith(".whl")]
    size = sum((index.root / p.lstrip("/").replace("%2B", "+")).stat().st_size for p in served)
    return proc, {"wheels": len(served), "distinct": len(set(served)), "bytes": size}
