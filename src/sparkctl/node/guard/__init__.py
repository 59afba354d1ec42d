"""The memory guard: a second node program (stdlib only), apart from ship's (node/pack.py FILES).

`memsense.py` then `memguard.py`, shipped as one file by `sparkctl.lifecycle.guard.program`.
"""
