"""What every engine's launch safety shares, with no engine in it: the in-image runner (an engine's
own parser run in its serving image), the result and request types of a launch check, and where
a model's files are found on this machine. Each engine's own rules live in its package."""
