"""The doors: each way out of a box, decided by the signer before it is used."""
