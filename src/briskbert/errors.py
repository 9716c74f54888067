"""Mistakes a user can fix (:class:`UserError`: one sentence naming the file or setting and the fix, printed as
one ``error:`` line, exit 2) and failed checks (:class:`CommandFailed`, exit 1); anything else is a bug."""

from __future__ import annotations

#: exit status of a command stopped by a user error (argparse uses the same for bad flags)
USER_ERROR_EXIT_CODE = 2
#: exit status of a command that ran but did not succeed (:class:`CommandFailed`)
FAILED_EXIT_CODE = 1


class UserError(Exception):
    """An expected mistake in the command's input; the message says what is wrong and how to fix it."""

    exit_code = USER_ERROR_EXIT_CODE


class SettingError(UserError):
    """A setting (a dataclass field, given on the command line as ``--<field>``) with a value that cannot
    be used; library code names the field, the command line prints it as its flag."""

    def __init__(self, field: str, problem: str):
        super().__init__(f"{field} {problem}")
        self.field, self.problem = field, problem


class CommandFailed(Exception):
    """A command that ran but did not succeed, for a reason its message gives (a check it performs
    failed, a process it started crashed: see its log): one ``error: ...`` line, exit status 1."""

    exit_code = FAILED_EXIT_CODE
