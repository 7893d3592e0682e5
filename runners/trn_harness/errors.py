"""The one exception type for mistakes the user can fix."""


class UsageError(Exception):
    """A mistake the user can fix: printed as one line naming the field and the fix, exit code 2."""
