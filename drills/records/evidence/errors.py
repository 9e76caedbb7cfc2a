"""The evidence package's exceptions: one root, :class:`EvidenceError`, under the harness's :class:`FiredrillError`.

Every message names the file (or ledger line) concerned, so the CLI can print it as is.
"""

from __future__ import annotations

from drills.errors import FiredrillError


class EvidenceError(FiredrillError):
    """Root of every deliberate error in :mod:`drills.records.evidence`."""


class CanonicalError(EvidenceError):
    """A value cannot be written as canonical JSON (NaN, infinity, a non-string key, an unknown type)."""


class KeyFileError(EvidenceError):
    """A signing or public key file is missing, unreadable, too open, not Ed25519, or would be overwritten."""


class EnvelopeError(EvidenceError):
    """A DSSE envelope or in-toto statement does not have the expected shape."""


class SecretLeakError(EvidenceError):
    """A secret given to :func:`drills.records.evidence.archive.seal` appears in a file that would enter the archive."""

    def __init__(self, message: str, files: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.files = files
        """The archive-relative paths of the files that hold a secret (never the secret)."""


class ArchiveError(EvidenceError):
    """The run directory cannot be sealed or packed (already sealed, a symlink inside, not a directory)."""


class VerifyReadError(EvidenceError):
    """``verify`` cannot read its input at all (missing path, not an archive, unreadable key or ledger):
    the CLI's exit code 2, as opposed to 1 for an archive that reads but does not verify."""
