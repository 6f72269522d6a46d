# Copyright: sparkfleet contributors
# Apache License 2.0
"""Import each module named on the command line and print what happened, as JSON: a program of its own.

spark_venv runs this file's source with the new venv's python (python -c SOURCE MODULE...) to check that
every import the stack matrix lists works there; an import failing in any way is the finding.
"""

import importlib
import json
import sys


def main(names):
    out = []
    for name in names:
        try:
            importlib.import_module(name)
            out.append({"module": name, "ok": True})
        except BaseException as exc:  # a failed import of any kind is the finding
            out.append({"module": name, "ok": False, "error": "%s: %s" % (type(exc).__name__, exc)})
    sys.stdout.write(json.dumps(out) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
