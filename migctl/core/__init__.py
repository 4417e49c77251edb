"""The pure core: catalog, geometry, mig-parted configs and planning.

Nothing in here talks to Kubernetes or NVML; an import-linter contract (pyproject.toml) enforces it.
"""
