"""Errors the CLI reports as one line (no traceback) with a non-zero exit."""


class UserError(Exception):
    """Caused by input or environment (bad file, missing permission): exit code 2."""


class Terminated(BaseException):
    """SIGTERM or SIGHUP arrived (collector/files.py turns them into this, so cleanups
    run); a BaseException like KeyboardInterrupt, so no `except Exception` swallows it."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum
