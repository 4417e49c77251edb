"""Edges: translate Kubernetes (and later NVML) objects into the core's plain models and back."""
