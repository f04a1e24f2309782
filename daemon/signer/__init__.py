"""The signer: a separate process with its own keys that decides each door and signs it into the log."""
