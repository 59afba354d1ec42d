"""sparkctl: serve LLMs with SGLang + DFlash on one or two GPU boxes."""

__version__ = "0.1.0"
