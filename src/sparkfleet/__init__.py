"""sparkfleet: provision NVIDIA DGX Spark machines with Ansible."""

__version__ = "0.1.0"
