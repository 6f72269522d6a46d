"""The verification's one judge (module_utils/_verification.py): what every path - provision, refresh, venv and the
doctor - says of a check, in the same words."""

from __future__ import annotations

from ansible_collections.sparkfleet.spark.plugins.module_utils._verification import judge, recorded_lines

FAILED_PROBE = {"item": "/usr/local/bin/spark-gone", "failed": False, "changed": False, "rc": 127,
                "msg": "the probe could not run under /usr/local/bin/spark-gone (rc 127): not found; expected a "
                       "Python 3 interpreter there."}


def test_a_probe_that_could_not_run_is_judged_a_failure_that_says_why_and_what_to_do():
    out = judge({"images": {"results": [FAILED_PROBE]}, "platform": {"platform": "spark"}})
    (failure,) = out["failures"]
    assert failure.startswith("image /usr/local/bin/spark-gone: no answer - the probe did not run: the probe could "
                              "not run under /usr/local/bin/spark-gone (rc 127)")
    assert "Fix: make the launcher or interpreter named run on the host" in failure and "None" not in failure
    assert out["state"]["verdict"] == "failed" and out["state"]["gpu"][0]["verdict"] == "error"


def test_the_doctor_reads_back_the_judges_own_lines_each_failure_with_its_fix():
    ok = {"item": "/usr/local/bin/spark-ngc", "verdict": "ok", "line": "True 13.0", "notes": []}
    bad = {"item": "/usr/local/bin/spark-old", "verdict": "fail", "line": "False", "hypothesis": "runtime/flags",
           "evidence": "nvidia-smi failed inside the container", "fix": "add --runtime=nvidia --gpus all"}
    abi = {"item": "/opt/venv/bin/python", "verdict": "ok", "findings": [], "shared_objects_scanned": 40}
    out = judge({"images": {"results": [ok, bad]}, "abi": {"results": [abi]}})
    recorded = recorded_lines(out["state"])
    assert recorded[0] == out["lines"][0] == "GPU image /usr/local/bin/spark-ngc: OK True 13.0"
    assert recorded[1] == out["lines"][1] + ". Fix: add --runtime=nvidia --gpus all"
    assert recorded[2] == out["lines"][2] == "ABI /opt/venv/bin/python: OK (40 shared objects)"
