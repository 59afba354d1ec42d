"""One module per preflight check (or a closely related pair); registry.py finds them all.

A module defines `Check` subclasses (sparkctl.preflight.base) and the pure judging functions
they call, which are unit-tested on their own.
"""
