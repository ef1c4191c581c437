"""The one exception type that reaches the user as a single line (exit code 2)."""


class DltopError(Exception):
    """A problem with what the user asked for: unknown pid, not a training job, no permission."""
