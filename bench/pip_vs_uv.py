"""Benchmark: the bare-pip sequence installed by pip and by uv (`uv pip install`), the same steps with the same
arguments, as spark_venv runs them (uv with the module's own environment: module_utils/venv/_stack_matrix.uv_env,
bytecode compiled as pip compiles it), each into a fresh venv with a cold cache of its own, in one run, two ways:
from the indexes (a build without the hash lock) and from a wheelhouse (`--no-index --find-links`, the hash lock's
wheels, as a fleet builds by default). The venvs' packages are compared (the same result is the condition for
either to be used).

The sequence is the smoke step's stack on this machine (tests/integration/wheels.py smoke_index: real wheels, torch
2.13 CPU for Debian's Python 3.11, transformers, peft, torchao last with -U), served on 127.0.0.1 by the test bed's
index server. uv is the matrix's installer pin (matrix/spark-stack.yml), installed into a throwaway venv. Records
the figures with the commit in bench/results/pip_vs_uv.json. Not a test: run it by hand:

    .venv/bin/python bench/pip_vs_uv.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
for path in ("tests", "tests/integration", "testbed", "collections"):
    sys.path.insert(0, str(REPO / path))
import wheels  # noqa: E402
from ansible_collections.sparkfleet.spark.plugins.module_utils.venv._indexes import index_env, uv_env  # noqa: E402
from pyindex import installer_pin, server  # noqa: E402

PYTHON = "/usr/bin/python3.11"


def steps(url: str | None, house: str | None = None) -> list[tuple[list[str], list[str]]]:
    """(indexes, install arguments) per step, as spark_venv runs the sequence (from a wheelhouse: no index)."""
    sequence = [([f"{url}/cpu"], ["torch==2.13.0"]),
                ([f"{url}/pypi", f"{url}/cpu"], ["transformers==5.13.1", "peft==0.19.1"]),
                ([f"{url}/pypi", f"{url}/cpu"], ["-U", "torchao==0.17.0"])]
    if house:
        return [([], ["--no-index", "--find-links", house, *args]) for _indexes, args in sequence]
    return sequence


def installed(python: str) -> list[str]:
    program = ("import importlib.metadata as m; print('\\n'.join(sorted("
               "f\"{d.metadata['Name'].lower().replace('_', '-')}=={d.version}\" for d in m.distributions())))")
    out = subprocess.run([python, "-c", program], capture_output=True, text=True, check=True).stdout
    return [line for line in out.splitlines() if not line.startswith(("pip==", "setuptools=="))]


def run(argv: list[str], env: dict) -> None:
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv[:4])} failed: {proc.stderr[-2000:]}")


def build(tool: str, uv: str, work: Path, name: str, sequence: list, base: dict) -> dict:
    """One venv built by `tool` through the sequence, timed from the venv's creation (pip brought to today's
    first, not counted: Debian's Python 3.11 seeds pip 23.0.1, which misreads PEP 658 metadata)."""
    env = {**base, "PIP_CACHE_DIR": str(work / f"{name}-cache"), "UV_CACHE_DIR": str(work / f"{name}-cache")}
    venv = work / f"{name}-venv"
    run([PYTHON, "-m", "venv", str(venv)], env)
    if tool == "pip":
        run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "-U", "pip"], dict(os.environ))
    started = time.monotonic()
    seconds = []
    for indexes, args in sequence:
        step_start = time.monotonic()
        if tool == "pip":
            run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", *args], {**env, **index_env(indexes)})
        else:
            run([uv, "pip", "install", "--python", str(venv / "bin" / "python"), *args], {**env, **uv_env(indexes)})
        seconds.append(round(time.monotonic() - step_start, 1))
    figures = {"seconds": round(time.monotonic() - started, 1), "steps": seconds,
               "packages": installed(str(venv / "bin" / "python"))}
    print(f"{name}: {figures['seconds']} s (steps {seconds}), {len(figures['packages'])} packages")
    return figures


def main() -> int:
    root = wheels.smoke_index()
    served = server(root, 0, [])
    threading.Thread(target=served.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{served.server_address[1]}"
    house = str(wheels.CACHE / "smoke-index-wheels")
    base = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_")) and k != "COLUMNS"}
    base.update(PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1",
                PYTHONDONTWRITEBYTECODE="1", UV_NO_CONFIG="1", UV_PYTHON_DOWNLOADS="never", UV_NO_PROGRESS="1",
                UV_COMPILE_BYTECODE="1")
    figures = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        run([sys.executable, "-m", "venv", str(work / "tools")], base)
        run([str(work / "tools" / "bin" / "pip"), "install", "-q", installer_pin()], dict(os.environ))
        uv = str(work / "tools" / "bin" / "uv")
        version = subprocess.run([uv, "--version"], capture_output=True, text=True, check=True).stdout.strip()
        for way, sequence in (("indexes", steps(url)), ("wheelhouse", steps(None, house))):
            figures[way] = {tool: build(tool, uv, work, f"{way}-{tool}", sequence, base) for tool in ("pip", "uv")}
    result = {}
    for way, tools in figures.items():
        same = tools["pip"]["packages"] == tools["uv"]["packages"]
        ratio = round(tools["uv"]["seconds"] / tools["pip"]["seconds"], 2)
        print(f"{way}: same packages: {same}; uv takes {ratio:.2f} of pip's time")
        result[way] = {"same_packages": same, "uv_over_pip": ratio,
                       **{tool: {k: v for k, v in f.items() if k != "packages"} for tool, f in tools.items()}}
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True,
                            check=False).stdout.strip()
    (REPO / "bench" / "results" / "pip_vs_uv.json").write_text(json.dumps(
        {"commit": commit, "date": time.strftime("%Y-%m-%d"), "uv_version": version, **result,
         "packages": figures["indexes"]["pip"]["packages"]}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
