"""`migctl webhook`: a mutating admission webhook that turns VRAM requests into MIG profile requests.

Modules: `settings` (the `webhook:` config section), `admission` (AdmissionReview -> JSONPatch, no I/O), `tls` and
`certs` (serving certificate, rotation, caBundle), `view` (the periodic cluster summary), `events`, `server`
(HTTPS, standard library), `kube` (API calls), `app` (all of it together). The decision itself is pure:
`migctl.core.vram.decide`. docs/vram-requests.md describes the behaviour.
"""
