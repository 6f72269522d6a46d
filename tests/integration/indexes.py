"""The test bed's stand-in package index (testbed/pyindex.py) served on 127.0.0.1 for one test module.

Every request is recorded, so a test can count what pip fetched.
"""

from __future__ import annotations

import threading
from pathlib import Path

from pyindex import packages, server


class Index:
    def __init__(self, root: Path):
        self.root = root
        packages(root)
        self.requests: list[str] = []
        self.server = server(root, 0, self.requests)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def overrides(self) -> dict[str, str]:
        return {"https://pypi.org/simple": f"{self.url}/pypi",
                "https://download.pytorch.org/whl/cu130": f"{self.url}/cu130"}

    def wheels_fetched(self) -> list[str]:
        return sorted(p.rsplit("/", 1)[-1] for p in self.requests if p.endswith(".whl"))

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
