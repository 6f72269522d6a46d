"""Parsing gpg's colon listing and fingerprints users paste."""

from __future__ import annotations

import pytest
from ansible_collections.sparkfleet.spark.plugins.module_utils.host._gpg import (
    normalize_fingerprint,
    primary_fingerprints,
)

LISTING = """\
pub:-:4096:1:DDCAE044F796ECB0:1595886296:::-:::scESC::::::23::0:
fpr:::::::::C95B321B61E88C1809C4F759DDCAE044F796ECB0:
uid:-::::1595886296::0000::Example Publisher <keys@example.invalid>::::::::::0:
sub:-:4096:1:0123456789ABCDEF:1595886296::::::e::::::23:
fpr:::::::::1111111111111111111111110123456789ABCDEF:
pub:-:3072:1:32140EED742619B1:1764518400:::-:::scESC::::::23::0:
fpr:::::::::70f0903611435845a14a6e1932140eed742619b1:
"""


def test_primary_fingerprints_skip_subkeys():
    assert primary_fingerprints(LISTING) == [
        "C95B321B61E88C1809C4F759DDCAE044F796ECB0",
        "70F0903611435845A14A6E1932140EED742619B1",
    ]


@pytest.mark.parametrize("text", ["", "garbage\n", "fpr:::::::::ABC:\n"])
def test_nothing_without_a_pub_record(text):
    assert primary_fingerprints(text) == []


@pytest.mark.parametrize(("text", "expected"), [
    ("C95B 321B 61E8 8C18 09C4  F759 DDCA E044 F796 ECB0", "C95B321B61E88C1809C4F759DDCAE044F796ECB0"),
    ("0xc95b321b61e88c1809c4f759ddcae044f796ecb0", "C95B321B61E88C1809C4F759DDCAE044F796ECB0"),
])
def test_fingerprints_as_users_paste_them(text, expected):
    assert normalize_fingerprint(text) == expected


@pytest.mark.parametrize("text", ["DDCAE044F796ECB0", "not hex at all", ""])
def test_short_ids_and_junk_are_not_fingerprints(text):
    with pytest.raises(ValueError, match="is not a key fingerprint"):
        normalize_fingerprint(text)
