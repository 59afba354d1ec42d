"""`sparkctl verify`: is the OpenAI-compatible endpoint right? Checks run with the official SDK."""
