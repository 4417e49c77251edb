"""The node agent: reads the GPUs through NVML and publishes an inventory on its own Node."""
