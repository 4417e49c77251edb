"""The wire format: every label, annotation, taint and resource name migctl reads or writes, and the codecs of
migctl's own annotations. The bottom layer: it imports nothing from migctl, so the core, the adapters and every
component name the same keys from one place (`names`), and read and write migctl's records one way (`layout`,
`values`).
"""
