"""The venv's files apart from pip: marker, link, activate script and pruning (module_utils/venv/_venv.py)."""

from __future__ import annotations

import os

import pytest
from ansible_collections.sparkfleet.spark.plugins.module_utils.venv import _venv as venv


def _venv(root, name: str, **marker) -> str:
    path = root / name
    path.mkdir(parents=True)
    venv.write_marker(str(path), {"fingerprint": name, "matrix": "spark-stack", **marker})
    return str(path)


def test_a_marker_that_is_missing_or_broken_reads_as_none(tmp_path):
    assert venv.read_marker(str(tmp_path)) is None
    (tmp_path / venv.MARKER).write_text("{not json")
    assert venv.read_marker(str(tmp_path)) is None
    (tmp_path / venv.MARKER).write_text("[1, 2]")
    assert venv.read_marker(str(tmp_path)) is None


def test_the_link_switches_atomically_and_reports_the_active_venv(tmp_path):
    a = _venv(tmp_path / "venvs", "a", status="verified", last_verified="2026-11-01")
    b = _venv(tmp_path / "venvs", "b", status="verified")
    link = str(tmp_path / "venv")
    assert venv.active(link) is None
    venv.switch_link(link, a)
    assert venv.active(link)["path"] == a and venv.active(link)["last_verified"] == "2026-11-01"
    (tmp_path / "venv.sparkfleet-new").symlink_to(a)  # left over by an interrupted switch
    venv.switch_link(link, b)
    assert os.readlink(link) == b and not os.path.lexists(tmp_path / "venv.sparkfleet-new")


def test_a_path_that_is_not_a_link_is_never_replaced(tmp_path):
    (tmp_path / "venv").mkdir()
    with pytest.raises(ValueError, match="exists and is not a symlink"):
        venv.active(str(tmp_path / "venv"))


def test_the_activate_script_ends_with_the_matrix_environment():
    text = venv.with_environment("# activate\nVIRTUAL_ENV=x\n\n", {"TORCH_CUDA_ARCH_LIST": "12.1", "A": "1"})
    assert text.endswith(f"{venv.ENV_BEGIN}\nexport A='1'\nexport TORCH_CUDA_ARCH_LIST='12.1'\n{venv.ENV_END}\n")
    assert text.startswith("# activate\nVIRTUAL_ENV=x\n\n#")


def test_a_matrix_value_with_a_quote_is_exported_as_it_is_and_runs_nothing(tmp_path):
    """Sourced by a real shell: the value comes back whole, and the command it carries never runs."""
    import subprocess

    planted = tmp_path / "PWNED"
    value = f"a'; touch {planted}; echo '$(touch {planted}) `touch {planted}`"
    script = tmp_path / "activate"
    script.write_text(venv.with_environment("# activate\n", {"SPARK_X": value}))
    out = subprocess.run(["sh", "-c", f'. {script} && printf %s "$SPARK_X"'], capture_output=True, text=True,
                         check=True).stdout
    assert out == value and not planted.exists()


def test_pruning_keeps_the_current_the_replaced_and_the_newest_and_touches_only_sparkfleets(tmp_path):
    root = tmp_path / "venvs"
    old = _venv(root, "old", verified_at="2026-01-01T00:00:00")
    replaced = _venv(root, "replaced", verified_at="2026-02-01T00:00:00")
    newer = _venv(root, "newer", verified_at="2026-03-01T00:00:00")
    current = _venv(root, "current", verified_at="2026-04-01T00:00:00")
    (root / "not-ours").mkdir()  # no marker: never a candidate
    assert venv.to_prune(str(root), current, replaced, keep=1) == sorted([old, newer])
    assert venv.to_prune(str(root), current, replaced, keep=2) == [old]
    assert venv.to_prune(str(root), current, None, keep=1) == sorted([old, replaced])
    venv.remove(venv.to_prune(str(root), current, replaced, keep=0))
    assert sorted(p.name for p in root.iterdir()) == ["current", "not-ours"]


def test_pip_errors_keep_pips_explanation_and_drop_its_progress():
    out = "Looking in indexes: x\nCollecting torch\nThe conflict is caused by:\n    a 1 depends on b<2\n"
    err = "ERROR: ResolutionImpossible\n"
    assert venv.pip_error(out, err) == "The conflict is caused by:\n    a 1 depends on b<2\nERROR: ResolutionImpossible"


def test_a_venv_s_contents_are_read_from_its_dist_info_and_each_difference_named(tmp_path):
    from ansible_collections.sparkfleet.spark.plugins.module_utils.venv._venv import contents_drift, installed

    site = tmp_path / "lib" / "python3.12" / "site-packages"
    for name, version in (("Unsloth_Zoo", "2026.7.2"), ("peft", "0.20.0"), ("rich", "14.2.0")):
        info = site / f"{name}-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n\nlong text\n")
    found = installed(str(tmp_path))
    assert found == {"unsloth-zoo": "2026.7.2", "peft": "0.20.0", "rich": "14.2.0"}
    pinned = {"peft": "peft==0.19.1", "unsloth-zoo": "unsloth_zoo==2026.7.2", "trl": "trl==1.8.0"}
    built = {"peft": "0.19.1", "unsloth_zoo": "2026.7.2", "trl": "1.8.0"}
    assert contents_drift(found, built, pinned) == [
        "peft 0.20.0: the matrix pins 0.19.1", "rich 14.2.0: installed after the build",
        "trl: missing; the matrix pins 1.8.0"]
    assert contents_drift(found, {}, pinned) == ["peft 0.20.0: the matrix pins 0.19.1",
                                                 "trl: missing; the matrix pins 1.8.0"], "no record: the pins alone"
