"""chain_fuser package."""
