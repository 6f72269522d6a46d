"""Benchmark: the bare-pip sequence installed by pip and by uv (`uv pip install`), the same steps with the same
arguments from the same indexes, each into a fresh venv with a cold cache of its own, in one run; the two venvs'
packages compared (the same result is the condition for either to be used).

The sequence is the smoke step's stack on this machine (tests/integration/wheels.py smoke_index: real wheels, torch
2.13 CPU for Debian's Python 3.11, transformers, peft, torchao last with -U), served on 127.0.0.1 by the test bed's
index server. uv is installed into a throwaway venv from PyPI. uv asks its indexes in order and stops at the first
that has a package (pip merges them); `--index-strategy unsafe-best-match` is pip's behaviour, used here. Records
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
from pyindex import server  # noqa: E402

PYTHON = "/usr/bin/python3.11"


def steps(url: str) -> list[tuple[list[str], list[str]]]:
    """(indexes, install arguments) per step, as spark_venv runs the sequence."""
    return [([f"{url}/cpu"], ["torch==2.13.0"]),
            ([f"{url}/pypi", f"{url}/cpu"], ["transformers==5.13.1", "peft==0.19.1"]),
            ([f"{url}/pypi", f"{url}/cpu"], ["-U", "torchao==0.17.0"])]


def installed(python: str) -> list[str]:
    program = ("import importlib.metadata as m; print('\\n'.join(sorted("
               "f\"{d.metadata['Name'].lower().replace('_', '-')}=={d.version}\" for d in m.distributions())))")
    out = subprocess.run([python, "-c", program], capture_output=True, text=True, check=True).stdout
    return [line for line in out.splitlines() if not line.startswith(("pip==", "setuptools=="))]


def run(argv: list[str], env: dict) -> None:
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv[:4])} failed: {proc.stderr[-2000:]}")


def main() -> int:
    root = wheels.smoke_index()
    served = server(root, 0, [])
    threading.Thread(target=served.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{served.server_address[1]}"
    base = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_"))}
    base.update(PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1", UV_NO_CONFIG="1")
    figures = {}
    with tempfile.TemporaryDirectory() as work:
        tools = Path(work) / "tools"
        run([sys.executable, "-m", "venv", str(tools)], base)
        run([str(tools / "bin" / "pip"), "install", "-q", "uv"], {k: v for k, v in os.environ.items()})
        uv = str(tools / "bin" / "uv")
        version = subprocess.run([uv, "--version"], capture_output=True, text=True, check=True).stdout.strip()
        for tool in ("pip", "uv"):
            env = {**base, "PIP_CACHE_DIR": f"{work}/{tool}-cache", "UV_CACHE_DIR": f"{work}/{tool}-cache"}
            venv = Path(work) / f"{tool}-venv"
            started = time.monotonic()
            if tool == "pip":
                run([PYTHON, "-m", "venv", str(venv)], env)
                # Debian's Python 3.11 seeds pip 23.0.1, which misreads PEP 658 metadata ("inconsistent Name"):
                # today's pip first (as Ubuntu 24.04's Python 3.12 seeds pip 24), not counted.
                run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "-U", "pip"],
                    {k: v for k, v in os.environ.items()})
                started = time.monotonic()
            else:
                run([uv, "venv", "-q", "--python", PYTHON, str(venv)], env)
            seconds = []
            for indexes, args in steps(url):
                step_start = time.monotonic()
                if tool == "pip":
                    run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", *args],
                        {**env, "PIP_INDEX_URL": indexes[0], "PIP_EXTRA_INDEX_URL": " ".join(indexes[1:]),
                         "PIP_TRUSTED_HOST": "127.0.0.1"})
                else:
                    run([uv, "pip", "install", "-q", "--python", str(venv / "bin" / "python"), "--index-url",
                         indexes[0], *[a for i in indexes[1:] for a in ("--extra-index-url", i)],
                         "--index-strategy", "unsafe-best-match", *[("--upgrade" if a == "-U" else a) for a in args]],
                        env)
                seconds.append(round(time.monotonic() - step_start, 1))
            figures[tool] = {"seconds": round(time.monotonic() - started, 1), "steps": seconds,
                             "packages": installed(str(venv / "bin" / "python"))}
            print(f"{tool}: {figures[tool]['seconds']} s (steps {seconds}), {len(figures[tool]['packages'])} packages")
    same = figures["pip"]["packages"] == figures["uv"]["packages"]
    print(f"same packages: {same}; uv takes {figures['uv']['seconds'] / figures['pip']['seconds']:.2f} of pip's time")
    if not same:
        print("only pip:", sorted(set(figures["pip"]["packages"]) - set(figures["uv"]["packages"])))
        print("only uv:", sorted(set(figures["uv"]["packages"]) - set(figures["pip"]["packages"])))
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True,
                            check=False).stdout.strip()
    (REPO / "bench" / "results" / "pip_vs_uv.json").write_text(json.dumps(
        {"commit": commit, "date": time.strftime("%Y-%m-%d"), "uv_version": version, "same_packages": same,
         **{tool: {k: v for k, v in f.items() if k != "packages"} for tool, f in figures.items()},
         "packages": figures["pip"]["packages"]}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
