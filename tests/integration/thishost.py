"""This machine as a sparkfleet host, for what the lab's emulated hosts cannot do (start containers, build).

A local connection, a non-Spark by override whose GPU is simulated, running arm64 images under qemu on
purpose (`spark_images_platform: linux/arm64`), with the launchers, records and state under the test's
directory so nothing of this machine's own state is written. Driven through the real `sparkfleet` CLI.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml
from ansible_collections.sparkfleet.spark.plugins.module_utils.common._yaml import inert_load

from conftest import BIN, REPO

HOST = "this-machine"


def inventory(tmp_path: Path, registry: str, **group_vars) -> Path:
    """An inventory of this machine with the catalog's ngc image served by `registry` (host:port)."""
    inv = tmp_path / "inventory"
    (inv / "group_vars" / "all").mkdir(parents=True)
    (tmp_path / "bin").mkdir(exist_ok=True)
    (inv / "hosts.yml").write_text(yaml.safe_dump({"sparks": {"hosts": {HOST: {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}}))
    (inv / "group_vars" / "all" / "main.yml").write_text(yaml.safe_dump({
        "spark_preflight_require_spark": False,
        "spark_preflight_simulated": True,
        "spark_preflight_min_docker_free_gib": 1,
        "spark_images_platform": "linux/arm64",
        "spark_images_catalog": [{"name": "ngc", "registry": "nvcr.io", "repository": "nvidia/pytorch",
                                  "tags": ["25.11-py3"], "launcher": "spark-ngc"}],
        "spark_images_registry_replacements": {"nvcr.io": registry},
        "spark_images_launcher_dir": str(tmp_path / "bin"),
        "spark_images_record_file": str(tmp_path / "pulled-images.json"),
        "spark_images_build_dir": str(tmp_path / "build"),
        "spark_verify_state_file": str(tmp_path / "state.json"),
        **group_vars,
    }))
    return inv


def sparkfleet(inv: Path, report: Path, *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    proc = subprocess.run([str(BIN / "sparkfleet"), *args, "-i", str(inv), "--plain", "--report-dir", str(report)],
                          cwd=REPO, capture_output=True, text=True, check=False,
                          env={**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}"})
    return proc, json.loads((report / "report.json").read_text())


def lock_of(inv: Path) -> dict:
    return inert_load((inv / "group_vars" / "all" / "spark_images_lock.yml").read_text())["spark_images_lock"]
