"""The daemon's HTTP API over a Unix socket (aiohttp): boxes, exec, events."""
