"""mig-parted's config file: reading, rendering and applying it (what the mig-manager will do to a node)."""
