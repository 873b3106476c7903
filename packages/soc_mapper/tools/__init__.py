"""Maintenance tools of soc_mapper (reference-data generators); not imported by the mapper itself."""
