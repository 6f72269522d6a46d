"""module_utils/common/_http.py: where a credential may go."""

from __future__ import annotations

import pytest
from ansible_collections.sparkfleet.spark.plugins.module_utils.common._http import UnsafeRedirect, follow, is_loopback


@pytest.mark.parametrize(("netloc", "loopback"), [
    ("127.0.0.1:5000", True), ("127.9.9.9", True), ("localhost:5000", True), ("[::1]:5000", True), ("::1", True),
    ("127.corp.example", False), ("127.0.0.1.nip.io:5000", False), ("nvcr.io", False), ("10.0.0.1:5000", False),
    ("localhost.evil.example", False)])
def test_only_loopback_addresses_are_loopback(netloc, loopback):
    assert is_loopback(netloc) is loopback


@pytest.mark.parametrize(("url", "location", "target", "keep"), [
    ("https://nvcr.io/v2/a/manifests/x", "/v2/a/manifests/y", "https://nvcr.io/v2/a/manifests/y", True),
    ("https://nvcr.io/v2/a/blobs/s", "https://cdn.example/blob?sig=1", "https://cdn.example/blob?sig=1", False),
    ("https://nvcr.io/x", "https://nvcr.io:8443/x", "https://nvcr.io:8443/x", False),
    ("http://127.0.0.1:5000/x", "http://127.0.0.2:5000/x", "http://127.0.0.2:5000/x", False),
    ("https://api.github.com/x", "https://api.github.com:443/y", "https://api.github.com:443/y", True)])
def test_a_redirect_keeps_the_credential_only_for_the_same_origin(url, location, target, keep):
    assert follow(url, location) == (target, keep)


@pytest.mark.parametrize("location", ["http://nvcr.io/x", "file:///etc/passwd", "ftp://nvcr.io/x"])
def test_a_redirect_that_lowers_the_transport_is_refused(location):
    with pytest.raises(UnsafeRedirect):
        follow("https://nvcr.io/x", location)
