"""The exception root of the harness."""


class FiredrillError(Exception):
    """Root of every deliberate error in the harness; the CLI prints these without a traceback."""
