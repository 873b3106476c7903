"""soc_mapper package."""
