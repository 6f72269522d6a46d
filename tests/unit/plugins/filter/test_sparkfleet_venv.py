"""spark_venv's judgement of a new venv: both checks must pass, and a failure says what stays active."""

from __future__ import annotations

from ansible_collections.sparkfleet.spark.plugins.filter import sparkfleet_venv as venv

ACTIVE = {"path": "/opt/sparkfleet/venvs/a", "status": "verified"}
ACCEPTED = ("unsloth 2026.7.2 declares transformers<=5.5.0,>=4.51.3; the venv has transformers 5.13.1 (accepted: "
            "the source document's set)")
BUILD = {"path": "/opt/sparkfleet/venvs/b", "action": "build", "active": ACTIVE, "staleness": {"stale": False},
         "dependencies": {"checked": True, "accepted": [ACCEPTED], "unaccepted": []}}
GPU_OK = {"verdict": "ok", "line": "True 13.0", "torch_version": "2.9.0+cu130"}
ABI_OK = {"verdict": "ok", "findings": []}


def test_a_venv_passes_only_when_the_gpu_line_and_the_abi_scan_are_both_ok():
    verdict = venv.spark_venv_verdict(BUILD, GPU_OK, ABI_OK, False)
    assert verdict["passed"] is True
    assert verdict["verification"] == {"line": "True 13.0", "gpu": "ok", "abi": "ok", "abi_findings": [],
                                       "dependencies": "ok", "accepted_deviations": [ACCEPTED],
                                       "dependency_problems": [], "torch": "2.9.0+cu130", "simulated": False,
                                       "verified_by": "GPU probe and ABI scan", "notes": []}
    gpu_note = "probed torch only; installed, not probed: triton (triton 3.6.0)"
    abi_note = "x 1.0: its name or version says CUDA 12 (cu12), not 13"
    noted = venv.spark_venv_verdict(BUILD, {**GPU_OK, "notes": [gpu_note]}, {**ABI_OK, "notes": [abi_note]}, False)
    assert noted["passed"] is True
    assert noted["verification"]["notes"] == [gpu_note, abi_note]
    abi_bad = {"verdict": "mismatch", "findings": ["bitsandbytes links libcudart.so.12"]}
    assert venv.spark_venv_verdict(BUILD, GPU_OK, abi_bad, False)["passed"] is False
    assert venv.spark_venv_verdict(BUILD, {"verdict": "fail", "line": "False"}, ABI_OK, False)["passed"] is False
    assert venv.spark_venv_verdict(BUILD, None, None, False)["passed"] is False  # a check that did not run


def test_a_failure_names_both_checks_the_diagnosis_and_the_venv_that_stays_active():
    gpu = {"verdict": "fail", "line": "False", "hypothesis": "CUDA 12 wheel", "evidence": "libcudart.so.12"}
    abi = {"verdict": "mismatch", "findings": ["torch links libcudart.so.12"]}
    failure = venv.spark_venv_verdict(BUILD, gpu, abi, False)["failure"]
    assert failure == ("the new venv /opt/sparkfleet/venvs/b failed verification (gpu fail: False (CUDA 12 wheel: "
                       "libcudart.so.12); abi mismatch torch links libcudart.so.12; pip check ok); the active venv "
                       "/opt/sparkfleet/venvs/a is untouched")
    alone = venv.spark_venv_verdict({**BUILD, "active": None}, gpu, abi, False)["failure"]
    assert alone.endswith("; no venv is active")


def test_a_simulated_host_says_its_torch_is_a_stand_in():
    verification = venv.spark_venv_verdict(BUILD, GPU_OK, ABI_OK, True)["verification"]
    assert verification["simulated"] is True and "stand-in torch" in verification["verified_by"]


def test_the_active_venv_is_the_switched_one_and_a_failed_new_one_is_flagged():
    switched = {"active": {"path": BUILD["path"], "status": "verified"}}
    passed = venv.spark_venv_verdict(BUILD, GPU_OK, ABI_OK, False)
    active = venv.spark_venv_active(BUILD, switched, passed, "/x/matrix/spark-stack.yml")
    assert (active["path"], active["matrix_file"]) == (BUILD["path"], "spark-stack.yml")
    assert active["new_venv_failed"] is False
    failed = venv.spark_venv_verdict(BUILD, None, None, False)
    kept = venv.spark_venv_active(BUILD, {}, failed, "spark-stack.yml")
    assert (kept["path"], kept["new_venv_failed"]) == (ACTIVE["path"], True)
    nothing_built = venv.spark_venv_active({**BUILD, "action": "none"}, {}, failed, "spark-stack.yml")
    assert nothing_built["new_venv_failed"] is False


def test_a_venv_whose_pip_check_holds_what_the_matrix_does_not_accept_fails_and_says_what():
    missing = "unsloth-zoo 2026.7.2 declares tyro; the venv does not have it"
    broken = {**BUILD, "dependencies": {"checked": True, "accepted": [ACCEPTED], "unaccepted": [missing]}}
    verdict = venv.spark_venv_verdict(broken, GPU_OK, ABI_OK, False)
    assert verdict["passed"] is False, "the GPU line and the ABI scan pass; the venv's own pip check does not"
    assert verdict["verification"]["dependency_problems"] == [missing]
    assert f"pip check broken: {missing} - each must be installed by a step of the matrix or accepted" in \
        verdict["failure"]
    # A venv built before sparkfleet ran pip check: not judged on it, and said.
    old = venv.spark_venv_verdict({**BUILD, "dependencies": None}, GPU_OK, ABI_OK, False)
    assert old["passed"] is True and "pip check: not recorded" in old["verification"]["notes"][0]


def test_verify_names_each_package_of_a_changed_venv_with_what_moves_it():
    """Issue 58, item 1: the active venv is this matrix's (its marker), but what is installed differs: each package
    is drift, with the command that builds the venv anew beside it."""
    active = {"path": "/opt/sparkfleet/venvs/unsloth-2026.7.2-0123456789ab", "fingerprint": "0123456789ab" * 5,
              "status": "verified"}
    build = {"action": "build", "active": active, "fingerprint": active["fingerprint"],
             "contents_drift": ["peft: missing; the matrix pins 0.19.1"]}
    out = venv.spark_venv_active(build, None, {}, "matrix/spark-stack.yml", True)
    assert out["drift"] == [f"venv {active['path']}: peft: missing; the matrix pins 0.19.1 - `sparkfleet provision` "
                            "builds the matrix's venv anew beside it, verifies it and makes it active (this one is "
                            "kept)"]
    converged = {**build, "contents_drift": [], "action": "none"}
    assert venv.spark_venv_active(converged, None, {}, "m.yml", True)["drift"] == []
