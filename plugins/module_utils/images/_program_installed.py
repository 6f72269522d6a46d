# Copyright: sparkfleet contributors
# Apache License 2.0
"""Print the Python distributions installed, {name: version} as JSON, without pip: a program of its own.

spark_image_build runs this file's source with a base image's python3 (in a throwaway container,
--network none) to refuse a derived image that would reinstall what the base already has.
"""

import importlib.metadata
import json
import sys


def main():
    sys.stdout.write(json.dumps({d.metadata["Name"]: d.version for d in importlib.metadata.distributions()
                                 if d.metadata["Name"]}) + "\n")


if __name__ == "__main__":
    main()
