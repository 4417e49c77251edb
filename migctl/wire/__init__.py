"""The wire format: every label, annotation, taint and resource name migctl reads or writes, and the codecs of
migctl's own annotations. The bottom layer: it imports nothing from migctl, so the core, the adapters and every
component name the same keys from one place (`names`), and read and write migctl's records one way: `layout`
(the applied layout, also the target's shape), `inplace` (the in-place target and status), `vram_choice` (the
webhook's record on a pod), `values` (whole numbers, the fallback's GPU placement), all versioned by the one
rule of `versions` (the agent's inventory, in `migctl/core/model/inventory.py`, too).
"""
