"""The ``episodestream`` command line: a thin shell that parses arguments and calls the library.

Each command lives in its own module exposing ``register(subparsers)``; the module's handler
receives the parsed ``argparse.Namespace`` and returns a process exit status. The core's
commands (index, inspect, check, plan) live here; other packages add theirs through the
``episodestream.commands`` entry-point group (``name = "module:register"``), the way
``episodestream-tools`` adds bench, demo, serve, make-dataset and bench-summary. Without that
package, each of its commands prints one line saying how to install it and exits with 2.

Errors: whatever a command raises ends as one line on stderr, never a traceback
(``--debug``, before or after the command's name, prints the traceback above that line).
Exit status 2 for a usage error, an :class:`~episodestream.errors.EpisodeStreamError` (bad
input, a bad server) or an ``OSError`` (a file that cannot be written); ``EXIT_INTERNAL`` for
any other exception, which is a bug; 130 for Ctrl-C.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import re
import sys
import traceback
from collections.abc import Sequence
from importlib.metadata import EntryPoint, entry_points

from episodestream.errors import EpisodeStreamError

__all__ = [
    "COMMANDS_GROUP",
    "EXIT_ERROR",
    "EXIT_INTERNAL",
    "TOOLS_COMMANDS",
    "TOOLS_INSTALL",
    "build_parser",
    "main",
    "one_line",
]

#: bad input, a bad server, a file that cannot be written (argparse's usage errors too)
EXIT_ERROR = 2
#: an exception that is no EpisodeStreamError: a bug (sysexits' EX_SOFTWARE)
EXIT_INTERNAL = 70
_EXIT_INTERRUPTED = 130

# how much of an error message the line shows (a hostile server's text can be long)
_MESSAGE_CHARS = 2000
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_DEBUG_HINT = "run with --debug for the traceback"

# the core's command modules, in the order `--help` lists them
_COMMAND_MODULES: tuple[str, ...] = ("_index", "_inspect", "_check", "_plan")
#: the entry-point group through which other packages add commands
COMMANDS_GROUP = "episodestream.commands"
#: the commands episodestream-tools adds (the order `--help` lists them in)
TOOLS_COMMANDS: tuple[str, ...] = ("make-dataset", "serve", "demo", "bench", "bench-summary")
#: how to get them
TOOLS_INSTALL = "pip install 'episodestream[tools]'"
# options the main parser takes before a command's name (none takes a value)
_MAIN_FLAGS = re.compile(r"-v+|--verbose|--debug")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="episodestream",
        description="Stream LeRobot v3 video datasets into PyTorch training.",
    )
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging")
    parser.add_argument("--debug", action="store_true", help="on an error, print its traceback too")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module_name in _COMMAND_MODULES:
        importlib.import_module(f"episodestream.cli.{module_name}").register(subparsers)
    added = _added_commands()
    for name in (*TOOLS_COMMANDS, *sorted(set(added) - set(TOOLS_COMMANDS))):
        if name in added:
            added[name].load()(subparsers)
        elif name in TOOLS_COMMANDS:
            missing = subparsers.add_parser(name, help=f"(not installed: {TOOLS_INSTALL})")
            missing.set_defaults(handler=_not_installed)
    for command in subparsers.choices.values():
        # also after the command's name; SUPPRESS keeps a --debug given before it
        command.add_argument(
            "--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS
        )
    return parser


def _added_commands() -> dict[str, EntryPoint]:
    """Entry points of :data:`COMMANDS_GROUP` by command name (the first one of a name wins)."""
    added: dict[str, EntryPoint] = {}
    for point in entry_points(group=COMMANDS_GROUP):
        added.setdefault(point.name, point)
    return added


def _command_word(words: Sequence[str]) -> str | None:
    """The command's name among ``words``: the first word that is not a main-parser flag."""
    for word in words:
        if not _MAIN_FLAGS.fullmatch(word):
            return word
    return None


def _missing_tool(words: Sequence[str]) -> str | None:
    """The tools command ``words`` run, when no installed package provides it."""
    name = _command_word(words)
    if name in TOOLS_COMMANDS and name not in _added_commands():
        return name
    return None


def _not_installed(args: argparse.Namespace) -> int:
    print(_install_line(args.command), file=sys.stderr)
    return EXIT_ERROR


def _install_line(name: str) -> str:
    return f"episodestream {name}: needs the episodestream-tools package: {TOOLS_INSTALL}"


def one_line(message: str) -> str:
    """``message`` as one printable line: lines joined with `` | ``, control characters
    (a terminal's escape sequences) shown escaped, cut at a readable length."""
    text = " | ".join(part.strip() for part in message.splitlines() if part.strip())
    text = _CONTROL.sub(lambda match: ascii(match.group())[1:-1], text)
    if len(text) > _MESSAGE_CHARS:
        text = f"{text[:_MESSAGE_CHARS]}... ({len(text)} characters)"
    return text


def _describe(error: BaseException) -> str:
    try:
        return str(error)
    except Exception:  # a message that cannot even be made (an int past the digit limit)
        return ""


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    missing = _missing_tool(words)
    if missing is not None:  # before parsing: its options are unknown here
        print(_install_line(missing), file=sys.stderr)
        return EXIT_ERROR
    try:
        args = build_parser().parse_args(words)
    except Exception as error:  # an argument type that failed in a way argparse does not catch
        return _report(error, "episodestream", debug="--debug" in words)
    level = logging.WARNING - 10 * min(args.verbose, 2) if args.verbose else logging.INFO
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    prefix = f"episodestream {args.command}"
    try:
        return int(args.handler(args) or 0)
    except KeyboardInterrupt:
        print(f"{prefix}: interrupted", file=sys.stderr)
        return _EXIT_INTERRUPTED
    except BrokenPipeError:
        # the reader of our output went away (`| head`): nothing left to say to it
        _silence_stdout()
        return EXIT_ERROR
    except Exception as error:
        return _report(error, prefix, debug=args.debug)


def _report(error: Exception, prefix: str, *, debug: bool) -> int:
    """Print ``error`` as one line (after its traceback with ``debug``); its exit status."""
    if debug:
        traceback.print_exc()
    message = one_line(_describe(error))
    if isinstance(error, EpisodeStreamError | OSError):
        print(f"{prefix}: error: {message or type(error).__name__}", file=sys.stderr)
        return EXIT_ERROR
    hint = "" if debug else f"; {_DEBUG_HINT}"
    detail = f": {message}" if message else ""
    print(
        f"{prefix}: unexpected {type(error).__name__}{detail} (a bug, please report it){hint}",
        file=sys.stderr,
    )
    return EXIT_INTERNAL


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so that flushing it at exit raises no second error."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


if __name__ == "__main__":
    sys.exit(main())
