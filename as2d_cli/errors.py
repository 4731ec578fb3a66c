"""One error hierarchy for the whole toolkit.

Every error the user can cause or fix carries a message that says what is wrong and
what to do next; the CLI prints it as one line (never a traceback) and exits non-zero.
"""

from __future__ import annotations


class As2dError(Exception):
    """Base of every error the toolkit raises on purpose."""

    exit_code: int = 1


class UserError(As2dError):
    """Bad input or a state the user must fix (a file, an option, a device)."""

    exit_code = 2


class FormatError(UserError):
    """A stored file (trace, profile, deployment, result) is malformed, too old or too new."""


class DeviceError(As2dError):
    """A device disappeared, timed out, refused a command or failed a gate."""

    exit_code = 3


class EngineError(As2dError):
    """The decoding engine was driven in a way its contract forbids (a programming error)."""

    exit_code = 4


class Interrupted(As2dError, KeyboardInterrupt):
    """Ctrl-C during long work: the message says where the partial data is and how to
    resume. Still a KeyboardInterrupt for code that only knows that."""

    exit_code = 130
