"""module_utils/common/_validate.py: one validator per kind of value that reaches a shell script, a path or a URL,
each fed the injection corpus and the values real users have."""

from __future__ import annotations

import pytest
from ansible_collections.sparkfleet.spark.plugins.module_utils.common import _validate as validate

CORPUS = ["a\nb", "a\rb", "a\0b", "$(id)", "`id`", "a'b", 'a"b', "a;b", "../x", "/abs", "a b", "x" * 300, ""]
GOOD = {
    "tag": ["25.09-py3", "dgxspark-latest", "latest", "v1.2_3"],
    "digest": ["sha256:" + "0" * 64],
    "registry": ["nvcr.io", "docker.io", "127.0.0.1:5000", "mirror.lan:5001", "localhost"],
    "repository": ["nvidia/pytorch", "unsloth/unsloth", "a/b-c/d_e.f"],
    "launcher": ["spark-ngc", "spark-unsloth", "spark-ngc-audio"],
    "host_name": ["spark-01", "spark-01.example.internal", "10.0.0.5", "localhost"],
    "iso_datetime": ["2026-12-01T04:00:00+00:00", "2026-07-14"],
    "env_name": ["TRITON_PTXAS_PATH", "HF_HOME", "_X1"],
    "relative_dir": ["finetuning", "work/runs", "a.b_c-d"],
    "platform": ["linux/arm64", "linux/amd64", "linux/arm64/v8"],
}


@pytest.mark.parametrize("kind", sorted(GOOD))
def test_what_users_have_passes(kind):
    check = getattr(validate, kind)
    assert [v for v in GOOD[kind] if check(v) is not None] == []


@pytest.mark.parametrize("kind", sorted(GOOD))
@pytest.mark.parametrize("value", CORPUS)
def test_the_injection_corpus_is_refused_saying_what_was_found_and_expected(kind, value):
    check = getattr(validate, kind)
    if kind == "iso_datetime" and value == "":
        assert check(value) is not None
        return
    said = check(value)
    assert said is not None, f"{kind} accepted {value!r}"
    assert said.startswith("is ") and "; expected " in said
    assert "\n" not in said and len(said) < 300, "the message quotes the value safely and briefly"


def test_an_environment_value_is_one_line():
    assert validate.env_value("/usr/local/cuda/bin/ptxas") is None and validate.env_value("a'b c") is None
    for value in ("a\nexport X=1", "a\0", "a\r"):
        assert validate.env_value(value) is not None
    assert validate.host_name("..") is not None and validate.host_name(".") is not None
