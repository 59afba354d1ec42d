"""GPU truth: probe a node's GPUs and test the fabric the ranks will talk over."""
