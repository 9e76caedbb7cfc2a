"""The inference canary's exception root and the deliberate failures under it."""

from __future__ import annotations


class InferenceError(Exception):
    """Root of every deliberate error of the inference canary; ``main`` turns each into an ``exit`` line and a code."""


class UsageError(InferenceError):
    """A bad option or environment variable; the message names it.  Exit code 2."""


class BadRequest(InferenceError):
    """A completion request the API does not accept (bad JSON, a wrong field); the message names the field.
    Answered 400, never fatal."""


class StartupError(InferenceError):
    """The server could not start (the address is taken, the port file cannot be written).  Exit code 1."""
