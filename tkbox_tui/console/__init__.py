"""The Textual console; it reaches the daemon only through its API client and wire schema."""
