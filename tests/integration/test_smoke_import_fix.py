"""Issue 58, item 6: `matrix propose` on the lab always failed its smoke step at import with a fix that did not apply
there ("install the matrix's stack (role spark_venv) ..."): the candidate venv holds the stack, but the test bed's
index serves stand-in wheels (a transformers without LlamaConfig). The fix now says which it is: a package not
installed, or one installed (named with its version) that is not a working build of it. A real venv (no pip, no
network), its site-packages holding what each case needs."""

from __future__ import annotations

import venv
from pathlib import Path

import pytest

from conftest import run_module


def _package(site: Path, name: str, version: str, code: str = "") -> None:
    (site / name).mkdir()
    (site / name / "__init__.py").write_text(f"__version__ = {version!r}\n{code}")
    info = site / f"{name}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")


@pytest.fixture
def interpreter(tmp_path):
    root = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(root)
    [site] = root.glob("lib/python3*/site-packages")
    return root / "bin" / "python", site


def _smoke(python: Path) -> dict:
    result = run_module("spark_smoke_train", {"python": str(python), "timeout": 120, "headroom_mb": 0,
                                              "device": "cpu"})
    assert not result["failed"], result.get("msg")
    return result


def test_a_stand_in_transformers_is_named_with_its_version_and_reinstalling_is_the_fix(interpreter):
    python, site = interpreter
    _package(site, "torch", "2.10.0")
    _package(site, "transformers", "5.13.1")  # no LlamaConfig: not the real transformers
    result = _smoke(python)
    assert result["verdict"] == "failed" and result["stage"] == "import", result
    assert "cannot import name 'LlamaConfig' from 'transformers'" in result["error"], result["error"]
    assert result["fix"].startswith("transformers 5.13.1 is installed but is not a working build of it (no "
                                    "LlamaConfig): a stand-in wheel"), result["fix"]
    assert "install the matrix's stack" not in result["fix"]


def test_a_missing_torch_is_named_and_installing_the_stack_is_the_fix(interpreter):
    python, _site = interpreter
    result = _smoke(python)
    assert result["verdict"] == "failed" and result["stage"] == "import", result
    assert result["fix"].startswith("torch is not installed in this interpreter: install the matrix's stack"), result
