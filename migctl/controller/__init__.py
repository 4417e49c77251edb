"""The controller behind `migctl run`: watches the cluster, plans, and reconfigures nodes one at a time, safely.

Modules by purpose: `errors` (API errors -> retryable or not), `kubeapi` (client calls with bounded retries),
`cache` (watched nodes/pods/ConfigMaps), `leader` (Lease election), `guards` (pure guard-rail decisions),
`actuator` (the resumable per-node state machine), `configmap` (migctl's mig-parted ConfigMap), `events`,
`metrics`, `loop` (the scheduler that ties them together). docs/operations.md describes the behaviour.
"""
