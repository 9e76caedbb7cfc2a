"""The baseline package's exceptions: one root, :class:`BaselineError`, under the harness's :class:`FiredrillError`.

Every message names what is wrong, where (the file, the field, the clause) and how to fix it, so the CLI prints
it as is.  Each kind maps to one exit code of ``firedrill baseline`` / ``firedrill compare`` (docs/CONTRACTS.md).
"""

from __future__ import annotations

from drills.errors import FiredrillError


class BaselineError(FiredrillError):
    """Root of every deliberate error in :mod:`drills.kinds.baseline`."""


class BaselineUsageError(BaselineError):
    """Bad input: an option, a workload mix file, a clause, a file that is not a baseline or a run archive."""


class ObservationError(BaselineError):
    """The window could not be observed: the source gave no reading for a slice (no claim either way)."""


class NotVerified(BaselineError):
    """A baseline statement or run archive does not verify (a signature, a digest, the statement's shape):
    it is refused before any number in it is read."""


class MethodMismatch(BaselineError):
    """Two observations were made with different methods (source, workload, window, ...): comparing them
    would compare the methods, not the platforms, so the comparison is refused."""

    def __init__(self, message: str, fields: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.fields = fields
        """The dotted paths of the method fields that differ (``window.seconds``, ``workload.mix``)."""
