"""Strict readers of text anyone can write: YAML/JSON documents, quantities, label values, mig-parted's grammar.

The bottom of the core: these import nothing else from it, so every layer above may use them."""
