"""Errors the CLI reports as one line (no traceback) with a non-zero exit."""


class UserError(Exception):
    """Caused by input or environment (bad file, missing permission): exit code 2."""
