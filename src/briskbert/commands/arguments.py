"""Command lines generated from the jobs' settings dataclasses with ``transformers.HfArgumentParser``, as
transformers' example scripts do: ``model, config = parse(__doc__, ModelSource, TrainingConfig, argv=argv)``."""

from __future__ import annotations

import argparse
import copy
import difflib
import sys
from dataclasses import fields

from briskbert.errors import SettingError
from briskbert.files import output_folder_problem


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Flag defaults in ``--help`` and the description as written (its usage example keeps its lines)."""

    def _format_action_invocation(self, action):
        # HfArgumentParser also accepts each flag spelled with dashes (--output-dir): --help shows it once
        first = copy.copy(action)
        first.option_strings = action.option_strings[:1]
        return super()._format_action_invocation(first)


def parse(description: str | None, *settings_types: type, argv: list[str] | None = None, **defaults) -> tuple:
    """Parse ``argv`` into one instance of each of ``settings_types``; ``defaults`` overrides field defaults."""
    parser = new_parser(description, *settings_types)
    parser.set_defaults(**defaults)
    namespace = parser.parse_args(argv)
    return tuple(
        kind(**{item.name: getattr(namespace, item.name) for item in fields(kind) if item.init})
        for kind in settings_types
    )


def new_parser(description: str | None, *settings_types: type) -> argparse.ArgumentParser:
    """The parser of ``settings_types``' fields; a command with flags of its own adds them to it."""
    from transformers import HfArgumentParser  # torch-free; only a command that parses pays for it

    class Parser(HfArgumentParser):
        error = _one_line_error

        def parse_args(self, args=None, namespace=None):
            # a typo is the likelier mistake than a missing flag: name it before argparse asks for those
            for token in sys.argv[1:] if args is None else args:
                flag = token.split("=")[0]
                if flag.startswith("--") and flag not in self._option_string_actions:
                    self.error(f"unrecognized arguments: {token}")
            return super().parse_args(args, namespace)

        def parse_known_args(self, args=None, namespace=None):
            namespace, extra = super().parse_known_args(args, namespace)
            # A folder no job could write is refused before torch loads, the same for every job.
            for name in ("output_dir", "out"):  # the settings that name the folder a job writes
                folder = getattr(namespace, name, None)
                if folder and (problem := output_folder_problem(folder)):
                    raise SettingError(name, problem)
            return namespace, extra

    # no abbreviations: --num_train_epoch is a typo to name, not --num_train_epochs to guess
    return Parser(settings_types, description=description, formatter_class=HelpFormatter, allow_abbrev=False)


def _one_line_error(parser: argparse.ArgumentParser, message: str):
    """argparse's error, in one line instead of the whole usage, with the closest flag for a typo."""
    unknown = message.removeprefix("unrecognized arguments: ").split()
    if message.startswith("unrecognized arguments") and unknown[0].startswith("--"):
        flag = unknown[0].split("=")[0]
        known = [option for action in parser._actions for option in action.option_strings]
        close = difflib.get_close_matches(flag, known, n=1)
        hint = f"did you mean {close[0]}?" if close else f"see {parser.prog} --help"
        message = f"unknown flag {flag}; {hint}"
    else:
        message += f" (see {parser.prog} --help)"
    print(f"{parser.prog}: error: {message}", file=sys.stderr)
    sys.exit(2)
