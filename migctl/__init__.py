"""migctl: dynamic MIG partitioning for Kubernetes GPU nodes."""

__version__ = "0.1.0"
