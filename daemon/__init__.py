"""tkbox host side (import name ``tkbox_daemon``): signer, evidence, policy, and later the daemon's doors."""
