"""The one exception type for mistakes the user can fix."""

from __future__ import annotations


class UsageError(Exception):
    """Printed as one line that names the field and the fix; the CLI exits with code 2."""
