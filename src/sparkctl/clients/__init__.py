"""Shared services: every HTTP talk to the engines' OpenAI-compatible API and to the router (the
request, its deadline, its timed stream, the prompts), below the flows that use them."""
