"""The error every command reports the same way, below the CLI and the commands that
raise it (so that `oncelog.cli`, which registers the commands, is imported by none of
them)."""


class CommandError(Exception):
    """A user-facing failure: printed as one line, exit status 1."""
