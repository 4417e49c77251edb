"""DRA objects -> `migctl.core.dra` records, one reader per kind (ResourceSlice, ResourceClaim and its template,
DeviceClass, the GPU Operator's GPUCluster/ClusterPolicy). Plain dicts in; every problem names kind, name, field."""
