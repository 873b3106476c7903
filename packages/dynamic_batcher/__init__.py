"""dynamic_batcher package."""
