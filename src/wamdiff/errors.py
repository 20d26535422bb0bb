"""The one error policy of the `wamdiff` command line.

A user error (a bad option value, a missing or corrupt input file, a recipe field, an output folder that cannot
be written or is in use) is printed as ONE line on stderr, `error: <where>: <what is wrong>; <what to do>`,
and the command exits with code 2. The traceback is shown only with `--debug` (anywhere on the command line)
or `WAMDIFF_DEBUG=1`.

Code at an input boundary raises `UserError` (or the `ValueError` it subclasses: the project's convention for
bad input, with the file, line and field in the message). `run_cli` maps these, click's usage errors and
the few library errors that bad files produce (unreadable files, truncated safetensors / zip archives, YAML
syntax) to the one line; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import os
import pickle
import sys
import zipfile
from typing import Callable, Sequence

USER_ERROR_EXIT = 2
INTERRUPTED_EXIT = 130  # 128 + SIGINT, what a shell reports for Ctrl-C
DEBUG_FLAG = "--debug"
DEBUG_ENV = "WAMDIFF_DEBUG"


class UserError(ValueError):
    """Bad input from the user; the message names the file / option / field and says what to do."""


def _library_input_errors() -> tuple[type[BaseException], ...]:
    """Errors that libraries raise on a bad input file (imported only if installed)."""
    found: list[type[BaseException]] = [zipfile.BadZipFile, pickle.UnpicklingError]
    try:
        from safetensors import SafetensorError

        found.append(SafetensorError)
    except ImportError:  # pragma: no cover - safetensors is a pinned dependency
        pass
    try:
        import yaml

        found.append(yaml.YAMLError)
    except ImportError:  # pragma: no cover - pyyaml is a pinned dependency
        pass
    return tuple(found)


def is_user_error(err: BaseException) -> bool:
    return isinstance(err, (ValueError, OSError, *_library_input_errors()))


def one_line(text: str) -> str:
    return " ".join(str(text).split())


def describe(err: BaseException) -> str:
    """The one-line message for a user error."""
    if isinstance(err, OSError) and err.filename is not None and err.strerror:
        return one_line(f"{err.filename}: {err.strerror}")
    msg = one_line(str(err)) or type(err).__name__
    if isinstance(err, UserError):
        return msg
    if not isinstance(err, (ValueError, OSError)):  # a library's message rarely says what it is about
        msg = f"{type(err).__name__}: {msg}"
    return f"{msg} (add {DEBUG_FLAG} for the traceback)"


def debug_requested(argv: Sequence[str]) -> tuple[bool, list[str]]:
    """(debug?, argv without the flag): `--debug` may stand anywhere so it can be appended to any command."""
    args = list(argv)
    flag = DEBUG_FLAG in args
    env = os.environ.get(DEBUG_ENV, "").strip().lower() not in ("", "0", "false", "no")
    return flag or env, [a for a in args if a != DEBUG_FLAG]


def _click_message(err) -> str:
    ctx = getattr(err, "ctx", None)
    msg = one_line(err.format_message())
    if ctx is None:
        return msg
    return f"{ctx.command_path}: {msg} (see '{ctx.command_path} --help')"


def run_cli(command: Callable[..., object], argv: Sequence[str] | None = None, prog_name: str = "wamdiff") -> int:
    """Run a click/typer command under the error policy; returns the exit code (never raises for user errors)."""
    import typer
    from typer._click import exceptions as click  # typer vendors click and re-exports few of its exceptions

    debug, args = debug_requested(sys.argv[1:] if argv is None else argv)

    def fail(message: str, code: int = USER_ERROR_EXIT) -> int:
        sys.stdout.flush()
        print(f"error: {message}", file=sys.stderr, flush=True)
        return code

    try:
        rv = command(args=args, prog_name=prog_name, standalone_mode=False)
    except click.NoArgsIsHelpError as err:  # bare `wamdiff data`: the help IS the message
        print(err.format_message(), file=sys.stderr)
        return USER_ERROR_EXIT
    except click.ClickException as err:
        return fail(_click_message(err))
    except typer.Abort:
        return fail("aborted", 1)
    except KeyboardInterrupt:
        return fail("interrupted", INTERRUPTED_EXIT)
    except Exception as err:  # noqa: BLE001 - the policy: user errors are one line, bugs keep their traceback
        if debug or not is_user_error(err):
            raise
        return fail(describe(err))
    if rv == INTERRUPTED_EXIT:  # typer turns Ctrl-C into Exit(130)
        return fail("interrupted (Ctrl-C); what was written so far is kept, re-run the same command to resume",
                    INTERRUPTED_EXIT)
    return rv if isinstance(rv, int) else 0
