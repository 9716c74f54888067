"""Mistakes a user can fix (:class:`UserError`: one sentence naming the file or setting and the fix, printed as
one ``error:`` line, exit 2) and failed checks (:class:`CommandFailed`, exit 1); anything else is a bug."""

from __future__ import annotations

USER_ERROR_EXIT_CODE = 2  # as argparse exits on a bad flag


class UserError(Exception):
    """An expected mistake in the command's input; the message says what is wrong and how to fix it."""

    exit_code = USER_ERROR_EXIT_CODE


class SettingError(UserError):
    """A setting (a dataclass field, ``--<field>`` on the command line) with a value that cannot be used."""

    def __init__(self, field: str, problem: str):
        super().__init__(f"{field} {problem}")
        self.field, self.problem = field, problem


class CommandFailed(Exception):
    """A command that ran but did not succeed (a check it performs failed, a process it started crashed)."""

    exit_code = 1
