"""The program sparkctl runs on nodes (python3 stdlib only; imports nothing of sparkctl)."""
