"""The router (`sglang-router`) in front of replica groups: its launch argv and a client
for its worker API (list, add, remove: what a rolling switch needs)."""
