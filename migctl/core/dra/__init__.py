"""What migctl reads of a DRA cluster: NVIDIA's device names, device records, the claims' CEL subset, claims as
demand, the allocator's first fit, and the fences that steer it (docs/dra.md). Pure: no Kubernetes client."""
