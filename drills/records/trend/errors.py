"""The trend package's exceptions: one root, :class:`TrendError`, under the harness's :class:`FiredrillError`.

Every message names what is wrong, where (the option, the file, the ledger line) and how to fix it, so the CLI
prints it as is (``firedrill trend`` exit 2).
"""

from __future__ import annotations

from drills.errors import FiredrillError


class TrendError(FiredrillError):
    """Root of every deliberate error in :mod:`drills.records.trend`."""


class TrendUsageError(TrendError):
    """Bad input: an option (``--since``, ``--last``), a reports folder with no ledger, an unreadable ledger or key."""
