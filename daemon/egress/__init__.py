"""The network door: the per-box egress proxy and the rules it applies to every connection out of a box.

The rules are sans-IO modules that tests drive without sockets.  For a connection's target: ``target`` reads
the three forms the proxy sees (``CONNECT host:port``, absolute-form ``http://`` URLs with their Host header,
and the ``WebFetch`` url the signer decides) and ``hostnames`` the host inside them; ``ranges`` classifies an
address against the special-purpose table after ``embeddings`` unwraps the IPv4 address inside IPv6
transition forms; ``resolved`` picks the exact address to dial; ``hostaddrs`` reads the host's own interface
addresses; ``refusals`` holds every rule id with what to do about it.  Only the proxy's shell opens sockets or
resolves names.
"""
