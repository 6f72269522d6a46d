# Copyright: sparkfleet contributors
# Apache License 2.0
"""The smoke step behind spark_smoke_train: its program (SMOKE, _program_smoke.py's source, which the interpreter
under test reads on stdin) and the judgement of the lines it printed (pure)."""

from __future__ import annotations

import inspect
import json

from ansible_collections.sparkfleet.spark.plugins.module_utils.verification import _program_smoke

SMOKE = inspect.getsource(_program_smoke)


def _lines(stdout: str) -> list[dict]:
    found = []
    for line in stdout.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                data = json.loads(line)
            except ValueError:
                continue
            if isinstance(data, dict) and "kind" in data:
                found.append(data)
    return found


def judge(stdout: str, stderr: str, rc: int | None, timeout: int) -> dict:
    """The smoke step's result: its verdict line as it printed it, or, when it printed none (it hung, a signal
    ended it, Python could not start), a failure at the last stage it reached, with why."""
    lines = _lines(stdout)
    stages = [line["stage"] for line in lines if line.get("kind") == "stage"]
    verdict = next((line for line in reversed(lines) if line.get("kind") == "verdict"), None)
    # exit_status, not rc: ansible-core marks a result whose rc is not 0 (None, a signal) as failed.
    base = {"timed_out": rc is None, "exit_status": rc}
    if verdict is not None:
        result = {k: v for k, v in verdict.items() if k != "kind"}
        result["gpu_verified"] = result.get("verdict") == "ok" and result.get("device") == "cuda"
        return {**base, **result}
    stage = stages[-1] if stages else "start"
    if rc is None:
        error = f"the step did not finish within {timeout} s (it was at {stage})"
        fix = "a stuck process may hold the GPU: reopen the shell or restart the container, then run it again"
    elif rc < 0 or rc > 128:
        signal = -rc if rc < 0 else rc - 128
        error = f"the step was killed by signal {signal} at {stage}"
        fix = ("a crash with no Python error is the ABI symptom: run the ABI scan on this environment (sparkfleet "
               "verify) and reinstall the wheel it names from the cu130 index")
    else:
        error = f"the step ended (rc {rc}) at {stage} without a verdict: {stderr.strip()[-600:]}"
        fix = "expected a Python 3 interpreter with torch there (the matrix's venv or a pinned image)"
    return {**base, "verdict": "failed", "stage": stage, "error": error, "fix": fix, "gpu_verified": False}
