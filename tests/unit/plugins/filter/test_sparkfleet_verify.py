"""spark_verify's judgement: what is recorded, what fails a host, what a simulated host shows."""

from __future__ import annotations

import pytest
from ansible_collections.sparkfleet.spark.plugins.filter import sparkfleet_verify as verify

OK = {"item": "/opt/venv/bin/python", "verdict": "ok", "line": "True 13.0", "torch_version": "2.10.0+cu130",
      "torch_cuda": "13.0", "device": {"name": "NVIDIA GB10", "capability": [12, 1]}, "notes": []}
FAILED = {"item": "nvcr.io/nvidia/pytorch@sha256:" + "a" * 64, "verdict": "failed", "line": "False 13.0",
          "hypothesis": "runtime/flags", "evidence": "nvidia-smi is not present inside the container",
          "fix": "start the container with --runtime=nvidia --gpus all"}
SPARK = {"host_class": "spark", "simulated": False}


def test_all_ok():
    out = verify.spark_verification({"images": {"results": []}, "pythons": {"results": [OK]},
                                     "abi": {"results": [{"item": OK["item"], "verdict": "ok", "findings": [],
                                                          "shared_objects_scanned": 40, "unreadable": []}]},
                                     "preflight": SPARK})
    assert out["failures"] == []
    assert out["state"]["verdict"] == "ok"
    assert out["lines"] == ["GPU python /opt/venv/bin/python: OK True 13.0",
                            "ABI /opt/venv/bin/python: OK (40 shared objects)"]


def test_a_failure_carries_the_diagnosis_into_the_failure_and_the_state():
    out = verify.spark_verification({"images": {"results": [FAILED]}, "preflight": SPARK})
    assert out["state"]["verdict"] == "failed"
    assert out["state"]["gpu"][0]["hypothesis"] == "runtime/flags"
    assert out["failures"] == [f"image {FAILED['item']}: False 13.0 - runtime/flags: nvidia-smi is not present "
                               f"inside the container. Fix: start the container with --runtime=nvidia --gpus all"]


def test_abi_findings_fail():
    finding = "bnb 0.49.2: links libcudart.so.12 (expected 13)"
    abi = {"results": [{"item": "/v/bin/python", "verdict": "mismatch", "findings": [finding]}]}
    out = verify.spark_verification({"abi": abi, "preflight": SPARK})
    assert out["failures"] == ["ABI /v/bin/python: bnb 0.49.2: links libcudart.so.12 (expected 13)"]


def test_abi_evidence_and_notes_reach_the_state_and_the_line():
    finding = "cuda-bindings 12.8.0: loads libcudart.so.12 at run time, by name (cuda/x.so) (expected 13)"
    note = "jax-cuda12-plugin 0.12.0.1: its name or version says CUDA 12 (cuda12), not 13 (nothing ...)"
    abi = {"results": [
        {"item": "/a/bin/python", "verdict": "mismatch", "findings": [finding], "notes": [],
         "findings_by_evidence": [{"distribution": "cuda-bindings", "evidence": "strings", "finding": finding}]},
        {"item": "/b/bin/python", "verdict": "ok", "findings": [], "notes": [note], "shared_objects_scanned": 11}]}
    out = verify.spark_verification({"abi": abi, "preflight": SPARK})
    assert [a["evidence"] for a in out["state"]["abi"]] == [["strings"], []]
    assert out["lines"] == [f"ABI /a/bin/python: MISMATCH - {finding}",
                            f"ABI /b/bin/python: OK (11 shared objects); note: {note}"]
    assert out["state"]["verdict"] == "failed"


def test_a_simulated_host_is_never_shown_as_a_pass():
    out = verify.spark_verification({"images": {"results": [{"skipped": True}]},
                                     "preflight": {**SPARK, "simulated": True},
                                     "gpu_not_verifiable": "simulated host: no GPU", "wanted_images": ["img@sha256:x"]})
    assert out["state"]["verdict"] == "not verified"
    assert out["failures"] == []
    assert out["lines"] == ["SIMULATED host: NOT VERIFIED img@sha256:x: simulated host: no GPU"]
    assert all("OK" not in line for line in out["lines"])


def test_nothing_provisioned_is_not_verified_rather_than_ok():
    out = verify.spark_verification({"preflight": SPARK})
    assert out["state"]["verdict"] == "not verified"


def test_the_plays_table_shows_each_hosts_verdict_and_a_stopped_host():
    out = verify.spark_verification({"pythons": {"results": [OK]}, "preflight": SPARK})
    hostvars = {"spark-01": {"ansible_facts": {"spark_preflight": SPARK},
                             "spark_verify_result": {**out, "history": "restored"}},
                # spark-02 gathered by an older sparkfleet: the host class under its old key, still read
                "spark-02": {"ansible_facts": {"spark_preflight": {"platform": "spark", "simulated": True}}}}
    header, one, two = verify.spark_fleet_table(["spark-01", "spark-02"], hostvars, ["spark-01"])
    assert header.split()[:3] == ["host", "class", "history"] and "changed" not in header
    assert one.split()[:3] == ["spark-01", "spark", "restored"] and " ok " in one
    assert one.index("restored") == header.index("history"), "the columns line up"
    assert two.split()[:5] == ["spark-02", "spark", "(simulated)", "-", "-"] and "stopped" in two


def test_the_active_venv_is_shown_and_recorded_with_its_staleness():
    active = {"path": "/opt/sparkfleet/venvs/unsloth-2026.7.2-d27a166f1d92",
              "python": "/opt/sparkfleet/venv/bin/python", "matrix": "unsloth-2026.7.2",
              "fingerprint": "d27a" * 16, "status": "verified",
              "verification": {"line": "True 13.0", "verified_by": "GPU probe and ABI scan"},
              "staleness": {"stale": True, "age_days": 139}, "new_venv_failed": True}
    out = verify.spark_verification({"pythons": {"results": [OK]}, "preflight": SPARK, "venv": active})
    assert out["lines"][-1] == ("VENV /opt/sparkfleet/venvs/unsloth-2026.7.2-d27a166f1d92 (unsloth-2026.7.2): VERIFIED "
                                "True 13.0 [GPU probe and ABI scan]; matrix STALE (139 days since last verified); "
                                "the new venv failed verification, this one stayed")
    assert out["state"]["venv"]["matrix"] == "unsloth-2026.7.2" and out["state"]["venv"]["stale"] is True
    assert verify.spark_verification({"preflight": SPARK, "venv": None})["state"]["venv"] is None


@pytest.mark.parametrize(("state", "record", "history"), [
    ({"status": "created"}, {"previous": None}, "fresh"),
    ({"status": "created"}, {}, "fresh"),  # no controller record kept (spark_verify_fleet_record_dir empty)
    ({"status": "created"}, {"previous": {"verification": {}}}, "restored"),
    ({"status": "unchanged"}, {"previous": {"verification": {}}}, "converged"),
    ({"status": "updated"}, {"previous": {"verification": {}}}, "updated")])
def test_history_tells_a_reinstalled_host_from_a_new_one(state, record, history):
    assert verify.spark_verification_history(state, record) == history


def test_limits_say_why_a_check_cannot_run_and_nothing_when_it_can():
    assert verify.spark_verification_limits({"simulated": False}, True) == {"gpu": "", "containers": ""}
    no_containers = verify.spark_verification_limits({"simulated": False}, False)
    assert no_containers["gpu"] == no_containers["containers"] != ""
    lab = verify.spark_verification_limits({"simulated": True}, False)
    assert lab["gpu"] == "simulated host: its GPU is a recorded nvidia-smi and its Docker cannot start containers"
    assert verify.spark_verification_limits({"simulated": True}, True)["containers"] == ""


@pytest.mark.parametrize(("state", "record", "history"), [
    ({"status": "created"}, {"previous": None}, "not provisioned"),
    ({"status": "created"}, {"previous": {"verification": {}}}, "reinstalled"),
    ({"status": "unchanged"}, {"previous": {"verification": {}}}, "converged"),
    ({"status": "updated"}, {"previous": {"verification": {}}}, "differs")])
def test_a_verify_says_how_the_host_compares_with_its_record_and_never_restored(state, record, history):
    """sparkfleet verify asks spark_state in check mode (issue 45, item 1): nothing was written, so nothing was
    restored or updated; a host that lost its state is one a provision restores."""
    assert verify.spark_verification_history(state, record, True) == history


def test_drift_fails_the_host_with_each_line_and_a_runtime_missing_only_where_it_was_read():
    pinned = [{"name": "unsloth", "ref": "r@sha256:" + "1" * 64, "drift": ["image unsloth: runs a, the lock says b"]}]
    judged = verify.spark_verification({"preflight": SPARK, "pinned": pinned, "venv": {"path": "/v", "drift": [
        "venv: no venv built from spark-stack.yml is active"]}, "runtime": {"registered": False, "runtimes": ["runc"]}})
    assert judged["state"]["verdict"] == "failed"
    assert judged["failures"] == ["image unsloth: runs a, the lock says b",
                                  "venv: no venv built from spark-stack.yml is active",
                                  "runtime: Docker does not list the nvidia runtime (its runtimes: runc), and every "
                                  "launcher runs --runtime=nvidia - `sparkfleet provision` registers it (role "
                                  "spark_container_runtime)"]
    assert judged["lines"][:3] == [f"DRIFT {line}" for line in judged["failures"]]
    assert judged["state"]["drift"] == judged["failures"]
    provision = verify.spark_verification({"preflight": SPARK, "pinned": [{"name": "ngc", "ref": "r"}],
                                           "runtime": None})
    assert "drift" not in provision["state"], "a provision's state keeps its shape"
