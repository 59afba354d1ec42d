"""sparkctl: check, ship, start, watch and stop LLM serving engines on DGX Spark boxes."""

__version__ = "0.1.0"
