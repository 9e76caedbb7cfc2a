"""The hollow fleet's one exception."""

from __future__ import annotations

from refplatform.errors import RefPlatformError


class HollowError(RefPlatformError):
    """The hollow fleet cannot start: bad arguments or a bad node tokens file; the message says how to fix it."""
