"""The programs sparkfleet runs in another Python (an image's, a venv's) are files of their own: each runs here.

Each is sent as its own source (inspect.getsource), the way the modules send it; the ABI scan runs as files
in one directory, laid out as spark_abi_scan mounts them into an image.
"""

from __future__ import annotations

import inspect
import json
import subprocess
import sys

from ansible_collections.sparkfleet.spark.plugins.module_utils.images import _derived
from ansible_collections.sparkfleet.spark.plugins.module_utils.venv import _program_imports
from ansible_collections.sparkfleet.spark.plugins.module_utils.verification import (
    _gpu_probe,
    _smoke,
)


def _run(*argv: str) -> str:
    proc = subprocess.run([sys.executable, *argv], capture_output=True, text=True, check=False, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_the_import_check_reports_each_module_and_the_error_of_one_that_fails():
    out = json.loads(_run("-c", inspect.getsource(_program_imports), "json", "sparkfleet_no_such_module"))
    assert out[0] == {"module": "json", "ok": True}
    assert out[1]["ok"] is False and out[1]["error"].startswith("ModuleNotFoundError: ")


def test_the_installed_check_lists_what_this_python_has_without_pip():
    installed = json.loads(_run("-c", _derived.INSTALLED_PROBE))
    # pytest runs this test, so this Python has it, whatever ansible-test installed beside it.
    assert "pytest" in installed and all(isinstance(version, str) and version for version in installed.values())


def test_the_gpu_probe_reports_the_environment_first_then_torch():
    lines = [json.loads(line) for line in _run("-I", "-c", _gpu_probe.PROBE).splitlines()]
    assert lines[0]["kind"] == "env" and lines[0]["python"] == sys.version.split()[0]
    # then the GPU frameworks it will not exercise; this test venv has none of them
    assert lines[1] == {"kind": "frameworks", "probed": ["torch"], "installed": [], "exercised": False}
    assert lines[2]["kind"] == "torch"  # imported or not, it says which
    assert _gpu_probe.parse_probe_output("\n".join(json.dumps(line) for line in lines))["env"]["uid"] >= 0


def test_the_smoke_step_says_where_it_is_first_and_stops_with_a_verdict():
    """Run by this test venv (no torch here): it reaches the import stage and says what to do."""
    lines = [json.loads(line) for line in _run("-I", "-c", _smoke.SMOKE, "--headroom-mb", "0").splitlines()]
    assert [line["kind"] for line in lines] == ["smoke", "stage", "stage", "verdict"]
    assert lines[0]["options"]["headroom_mb"] == 0
    verdict = lines[-1]
    assert (verdict["verdict"], verdict["stage"]) == ("failed", "import")
    assert verdict["error"] == "ModuleNotFoundError: No module named 'torch'"
    assert _smoke.judge("\n".join(json.dumps(line) for line in lines), "", 0, 60)["gpu_verified"] is False


def test_the_abi_scan_runs_as_files_beside_each_other_as_in_an_image(tmp_path):
    from ansible_collections.sparkfleet.spark.plugins.modules.spark_abi_scan import SCAN_FILES

    for name, module in SCAN_FILES:  # what spark_abi_scan mounts into the image, and nothing else
        (tmp_path / name).write_text(inspect.getsource(module))
    report = json.loads(_run("-I", str(tmp_path / "scan.py"), "13", "/usr/local/cuda").splitlines()[-1])
    assert report["python"] == sys.version.split()[0]
    assert report["trees"] and all("findings" in tree or "verdict" in tree for tree in report["trees"])
    assert "cudart_majors" in report["system"]
