"""The exception root of the reference platform.

Every error raised on purpose inside ``refplatform`` derives from
:class:`RefPlatformError`, so callers can catch the package's failures without
catching programming errors.
"""


class RefPlatformError(Exception):
    """Root of every deliberate error in the reference platform."""
