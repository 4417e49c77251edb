"""The controller behind `migctl run`: watches the cluster, plans, and reconfigures nodes one at a time, safely.

Modules by purpose: `leader` (Lease election), `guards` (pure guard-rail decisions),
`actuator` (the resumable per-node state machine), `configmap` (migctl's mig-parted ConfigMap), `events`,
`metrics`, `loop` (the scheduler that ties them together). The API calls, their errors and the watched cache
are the Kubernetes adapter's (`migctl.adapters.kube`). docs/operations.md describes the behaviour.
"""
