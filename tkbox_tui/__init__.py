"""tkbox's operator side: the ``tkbox`` command line and the Textual console."""
