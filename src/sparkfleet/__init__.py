"""sparkfleet: provision NVIDIA DGX Spark machines with Ansible."""

from importlib.metadata import PackageNotFoundError, version

try:
    # galaxy.yml's version, given to the package by setup.py.
    __version__ = version("sparkfleet")
except PackageNotFoundError:  # run from a checkout without installing it
    __version__ = "unknown"
