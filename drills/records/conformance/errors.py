"""The conformance package's exceptions: one root, :class:`ConformanceError`, under :class:`FiredrillError`.

Every message says what is wrong, where, and how to fix it, so the CLI prints it as is.
"""

from __future__ import annotations

from drills.errors import FiredrillError


class ConformanceError(FiredrillError):
    """Root of every deliberate error in :mod:`drills.records.conformance`."""


class ConformanceUsageError(ConformanceError):
    """Bad input (an unknown ``--version``, a RUN that is not a run archive, an OUT that is not empty, a bad
    metadata file): ``firedrill conformance`` exits 2 and writes nothing."""


class RunNotVerifiedError(ConformanceError):
    """The RUN archive reads but does not verify (a signature, digest or ledger link is wrong): exit 1, nothing
    written. ``problems`` are the verifier's lines, each naming its file."""

    def __init__(self, message: str, problems: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.problems = problems
