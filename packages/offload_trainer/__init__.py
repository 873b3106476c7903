"""offload_trainer package."""
