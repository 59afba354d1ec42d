"""llama.cpp's `llama-server` as a sparkctl engine (engine.py: the engine; flags.py: its flags,
options and the GGUF file's path)."""

from sparkctl.engines.llamacpp.engine import ENGINE, LlamaCpp

__all__ = ["ENGINE", "LlamaCpp"]
