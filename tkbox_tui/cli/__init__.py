"""The ``tkbox`` command line: one entry point dispatching to each command group."""
