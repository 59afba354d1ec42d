"""Programs sparkctl runs ON the nodes: python3 stdlib only, importing nothing of sparkctl."""
