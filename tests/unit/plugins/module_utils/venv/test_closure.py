"""module_utils/venv/_closure.py on the real packages' metadata (tests/fixtures/metadata: the METADATA headers of
the wheels on PyPI), as issue 48 found them: what the shipped set declares and does not meet, what no step
installs, and what the matrix accepts."""

from __future__ import annotations

import email.parser
from pathlib import Path

import yaml
from ansible_collections.sparkfleet.spark.plugins.module_utils.venv import _closure as closure

FIXTURES = Path(__file__).resolve().parents[4] / "fixtures" / "metadata"
MATRIX = yaml.safe_load((Path(__file__).resolve().parents[5] / "matrix" / "spark-stack.yml").read_text())
TARGET = {"python": "3.12", "arch": "aarch64", "glibc": "2.39"}


def real(name: str, version: str) -> dict:
    headers = email.parser.Parser().parsestr((FIXTURES / f"{name}-{version}.METADATA").read_text())
    return {"name": headers["Name"], "version": headers["Version"],
            "requires_dist": headers.get_all("Requires-Dist") or []}


def shipped_steps(**moved) -> list[dict]:
    """The shipped matrix's packages as its steps install them, with their real metadata (torch, bitsandbytes and
    hf_transfer declare nothing the closure judges)."""
    versions = {"transformers": "5.13.1", "peft": "0.19.1", "datasets": "4.3.0", "trl": "1.8.0",
                "unsloth": "2026.7.2", "unsloth_zoo": "2026.7.2", "torchao": "0.17.0", **moved}
    return [{"step": "torch", "resolved": True,
             "declared": [{"name": "torch", "version": "2.10.0+cu130", "requires_dist": []}]},
            {"step": "stack", "resolved": False,  # on PyPI it does not (trl 1.8.0's datasets): its pins alone
             "declared": [real(n, versions[n]) for n in ("transformers", "peft", "datasets", "trl")]
             + [real("hf_transfer", "0.1.9")]},
            {"step": "unsloth", "resolved": True, "no_deps": True,
             "declared": [real("unsloth", versions["unsloth"]), real("unsloth_zoo", versions["unsloth_zoo"]),
                          {"name": "bitsandbytes", "version": "0.49.2", "requires_dist": []}]},
            {"step": "torchao", "resolved": True, "declared": [real("torchao", "0.17.0")]}]


def test_the_shipped_set_violates_what_unsloth_declares_and_the_matrix_accepts_it_but_trl_s_datasets():
    """Issue 48, finding 1: unsloth and unsloth_zoo 2026.7.2 declare transformers<=5.5.0 and trl<=0.24.0 (pinned
    5.13.1, 1.8.0), trl 1.8.0 declares datasets>=4.7.0 (pinned 4.3.0); --no-deps kept pip from saying so."""
    judged = closure.judge(shipped_steps(), TARGET, MATRIX["accepted"])
    violations = {(f["declarer"], f["name"]): f for f in judged["findings"] if f["kind"] == "violation"}
    assert sorted(violations) == [("trl", "datasets"), ("unsloth", "transformers"), ("unsloth", "trl"),
                                  ("unsloth_zoo", "transformers"), ("unsloth_zoo", "trl")]
    assert violations[("unsloth", "transformers")]["text"] == (
        "unsloth 2026.7.2 declares transformers<=5.5.0 (of 15 clauses); step stack installs transformers 5.13.1")
    assert [f["text"] for f in judged["unaccepted"]] == [
        "trl 1.8.0 declares datasets>=4.7.0; step stack installs datasets 4.3.0"], "the one the matrix does not accept"
    assert all(violations[k]["accepted"].startswith("the source document's set") for k in violations
               if k != ("trl", "datasets"))


def test_no_deps_leaves_unsloths_own_dependencies_out_and_each_is_named():
    """Issue 48, finding 2: after the sequence, what unsloth and unsloth_zoo declare and nothing installs."""
    judged = closure.judge(shipped_steps(), TARGET, MATRIX["accepted"])
    missing = {f["name"].lower().replace("_", "-") for f in judged["findings"] if f["kind"] == "missing"
               and f["declarer"] in ("unsloth", "unsloth_zoo")}
    for name in ("diffusers", "nest-asyncio", "protobuf", "sentencepiece", "torchvision", "triton", "tyro", "wheel",
                 "cut-cross-entropy", "msgspec", "pillow"):
        assert name in missing, name
    assert "xformers" not in missing, "declared for x86_64 only: not on the target"
    said = {f["declarer"] for f in judged["findings"] if f["kind"] == "missing"}
    assert "transformers" not in said, "a step pip resolves with its dependencies brings them (had it resolved)"
    line = next(line for line in judged["lines"] if line.startswith("MISSING unsloth 2026.7.2 declares"))
    assert "tyro" in line and "torchvision" in line


def test_the_newest_unsloth_with_the_newest_stack_violates_eight_declared_requirements():
    """Issue 48, finding 3: the set matrix propose proposed (torch 2.15.0, transformers 5.25.0, datasets 5.2.0, trl
    1.16.0 with unsloth 2026.10.9) breaks what that Unsloth declares; a set within its ranges does not."""
    steps = shipped_steps(unsloth="2026.10.9", unsloth_zoo="2026.10.9", trl="1.16.0", datasets="4.7.0")
    steps[0]["declared"][0]["version"] = "2.15.0"
    steps[1]["declared"][0] = {"name": "transformers", "version": "5.25.0", "requires_dist": []}
    steps[1]["declared"][2] = {"name": "datasets", "version": "5.2.0", "requires_dist": []}
    judged = closure.judge(steps, TARGET)
    broken = sorted((f["declarer"], f["name"]) for f in judged["unaccepted"])
    assert broken == [("unsloth", "datasets"), ("unsloth", "torch"), ("unsloth", "transformers"), ("unsloth", "trl"),
                      ("unsloth_zoo", "datasets"), ("unsloth_zoo", "torch"), ("unsloth_zoo", "transformers"),
                      ("unsloth_zoo", "trl")], broken
    within = shipped_steps(unsloth="2026.10.9", unsloth_zoo="2026.10.9", trl="1.15.0", datasets="4.7.0")
    within[1]["declared"][0] = {"name": "transformers", "version": "5.17.0", "requires_dist": []}
    assert [f for f in closure.judge(within, TARGET)["unaccepted"] if f["declarer"].startswith("unsloth")] == []


def test_an_accepted_deviation_that_no_longer_happens_is_said_and_a_malformed_one_refused():
    judged = closure.judge(shipped_steps(), TARGET, [*MATRIX["accepted"], {"declared_by": "peft", "requires": "torch",
                                                                           "reason": "old"}])
    assert "note: accepted deviation peft -> torch no longer happens; remove it from the matrix" in judged["lines"]
    assert closure.accepted_problems([{"declared_by": "unsloth"}])[0].startswith("accepted[0] is ")
    assert closure.accepted_problems(None) == [] and closure.accepted_problems(MATRIX["accepted"]) == []


# What `pip check` listed in a fresh venv after the source document's four steps (issue 48: torch 2.13 CPU standing
# for the cu130 build): what unsloth and unsloth_zoo declare and nothing installed.
LEFT_OUT_BY_NO_DEPS = {"diffusers", "nest-asyncio", "protobuf", "sentencepiece", "torchvision", "triton", "tyro",
                       "wheel", "cut-cross-entropy", "msgspec", "pillow"}


def test_the_shipped_matrix_installs_each_dependency_unsloths_no_deps_step_left_out_every_pin_held():
    steps = {s["id"]: s for s in MATRIX["steps"]}
    pinned = {closure.normalize(p.split("==")[0]) for sid in ("torch", "unsloth_deps") for p in steps[sid]["packages"]}
    assert pinned >= LEFT_OUT_BY_NO_DEPS
    assert steps["unsloth_deps"]["hold"] is True and "--no-deps" not in steps["unsloth_deps"].get("args", [])
    # Each of them is something unsloth or unsloth_zoo 2026.7.2 really declares for the Spark target.
    declared = {closure.normalize(r.name) for name in ("unsloth", "unsloth_zoo")
                for r in closure.declared(real(name, "2026.7.2")["requires_dist"], TARGET)}
    assert LEFT_OUT_BY_NO_DEPS <= declared


def test_pip_check_of_a_built_venv_keeps_only_what_the_matrix_accepts():
    # pip's own wording (pip/_internal/commands/check.py), as a venv of the shipped set would print it.
    said = ("unsloth 2026.7.2 has requirement transformers!=4.52.0,<=5.5.0,>=4.51.3, but you have transformers "
            "5.13.1.\n"
            "unsloth-zoo 2026.7.2 has requirement trl!=0.19.0,<=0.24.0,>=0.18.2, but you have trl 1.8.0.\n"
            "trl 1.8.0 has requirement datasets>=4.7.0, but you have datasets 4.3.0.\n"
            "unsloth-zoo 2026.7.2 requires tyro, which is not installed.\n"
            "torch 2.10.0 is not supported on this platform\n")
    judged = closure.pip_check(said, MATRIX["accepted"])
    assert judged["accepted"] == [
        "unsloth 2026.7.2 declares transformers!=4.52.0,<=5.5.0,>=4.51.3; the venv has transformers 5.13.1 "
        "(accepted: the source document's set (NVIDIA's DGX Spark playbook) pins transformers 5.13.1 with this "
        "Unsloth)",
        "unsloth-zoo 2026.7.2 declares trl!=0.19.0,<=0.24.0,>=0.18.2; the venv has trl 1.8.0 (accepted: the source "
        "document's set (NVIDIA's DGX Spark playbook) pins trl 1.8.0 with this Unsloth)"]
    assert judged["unaccepted"] == ["trl 1.8.0 declares datasets>=4.7.0; the venv has datasets 4.3.0",
                                    "unsloth-zoo 2026.7.2 declares tyro; the venv does not have it",
                                    "torch 2.10.0 is not supported on this platform"]
    assert closure.pip_check("No broken requirements found.\n", MATRIX["accepted"]) == {
        "checked": True, "accepted": [], "unaccepted": []}


def test_missing_is_provisional_where_a_step_did_not_resolve_and_fails_the_check_once_every_step_did():
    """Issue 57, item 5: MISSING named 15 packages the unresolved stack step would have brought, never said it was
    provisional and never failed. Now: provisional (and said so) while a step did not resolve; a failure, unless
    accepted, once every step resolved - a venv without it fails at import."""
    unresolved = closure.judge(shipped_steps(), TARGET, MATRIX["accepted"])
    missing_lines = [line for line in unresolved["lines"] if line.startswith("MISSING")]
    assert missing_lines and all(line.endswith("(provisional: step stack did not resolve, and what it would "
                                               "install is not known)") for line in missing_lines), missing_lines
    assert not [f for f in unresolved["unaccepted"] if f["kind"] == "missing"] and unresolved["provisional"] == [
        "stack"]

    steps = shipped_steps()
    steps[1]["resolved"] = True
    resolved = closure.judge(steps, TARGET, MATRIX["accepted"])
    failing = {f["name"] for f in resolved["unaccepted"] if f["kind"] == "missing"}
    assert "tyro" in failing and not any("provisional" in line for line in resolved["lines"])
    accepting = [*MATRIX["accepted"], {"declared_by": "unsloth_zoo", "requires": "tyro", "reason": "r"}]
    assert "tyro" not in {f["name"] for f in closure.judge(steps, TARGET, accepting)["unaccepted"]
                          if f["declarer"] == "unsloth_zoo"}
