"""fusion_perf package."""
