"""`up --supervise`: the detached process (process.py: spawn, hold, stop) and its loop (supervise.py)."""
