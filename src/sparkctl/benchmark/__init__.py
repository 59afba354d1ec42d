"""`sparkctl bench`: how fast the endpoint really is, with token counts from the server's `usage`."""
