"""Shared services: the controller's side of the node programs (run one op and read its result,
the weights manifest of a node's HF cache and its diff), below the flows that use them."""
