"""What the command modules share: the consoles, the option types, ``fail``,
and :class:`App`, a Typer whose commands report a ``glyph.errors.GlyphError``
as one line. Imports nothing from glyph but ``glyph.errors`` (stdlib only), so
every command module can import it."""

from __future__ import annotations

import functools
import sys
from pathlib import Path
from typing import Annotated, NoReturn, Optional

import rich
import typer
import typer.core
from rich.console import Console
from rich.markup import escape

from glyph.errors import GlyphError

console = Console()
err = Console(stderr=True)
rich.reconfigure(stderr=True)
"""rich's global console writes to stderr: a progress bar that a library module
draws on it (``rich.progress.track``, a ``Progress`` given no console: glyph's
data preparation) never mixes into what a command prints on stdout."""

MbppPath = Annotated[Optional[Path], typer.Option("--mbpp-path", help="MBPP JSONL (default: $GLYPH_MBPP_PATH)")]

def fail(message: str) -> NoReturn:
    """``error: <message>`` on stderr, exit 2."""
    err.print(f"[red]error:[/red] {escape(message)}", highlight=False, soft_wrap=True)
    raise typer.Exit(2)


def is_user_error(exc: BaseException) -> bool:
    """A ``glyph.errors.GlyphError`` (input the user can fix from its message), or the sandbox's
    ``SandboxUnavailable`` (the sandbox imports nothing from glyph; looked up in ``sys.modules``: a
    module never imported cannot have raised it)."""
    sandbox = sys.modules.get("glyph.sandbox.client")
    return isinstance(exc, GlyphError) or (sandbox is not None and isinstance(exc, sandbox.SandboxUnavailable))


def named_errors_fail(func):
    """``func`` with a user error (:func:`is_user_error`) turned into :func:`fail`; anything else
    propagates: a bug."""

    @functools.wraps(func)
    def command(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except Exception as exc:
            if not is_user_error(exc):
                raise
            fail(str(exc))

    return command


HELP_OPTIONS = {"help_option_names": ["-h", "--help"]}
"""``-h`` as well as ``--help``, on every command (a click context inherits it)."""


def _untyped_flags(params: list) -> list:
    """``params`` with each flag's type label (typer shows ``<bool>``) left out: a flag takes no value.
    An empty metavar is what typer's help shows instead; click's own help never shows a flag's."""
    for p in params:
        if getattr(p, "is_flag", False) and not getattr(p, "count", False):
            p.metavar = ""
    return params


def _plain_values(params: list) -> list:
    """``params`` with each plain ``str``, ``bool`` or ``Path`` option's value read without pydantic
    (:class:`_PlainValue`), so that a command given only such options (``glyph grade``) does not
    import it (typer 0.29 coerces every value through a pydantic ``TypeAdapter``, built on the first
    value: ``typer/core.py:100-109``, ``typer/_coercion.py:234-245``; importing pydantic is most of
    the CPU of a ``glyph grade``). Where typer has no such hook (another version) it does nothing."""
    if _PlainValue is None:
        return params
    for p in params:
        desc = getattr(p, "type_descriptor", None)
        if getattr(p, "_runtime_param", False) is None and desc is not None and _is_plain(desc):
            p._runtime_param = _PlainValue(parameter_info=desc.parameter_info, annotation=desc.annotation)
    return params


def _is_plain(desc) -> bool:
    info = desc.parameter_info
    if desc.file_annotation is not None or info.parser is not None or getattr(info, "click_type", None):
        return False
    if desc.annotation in (str, bool):
        return True
    return isinstance(desc.annotation, type) and issubclass(desc.annotation, Path) and info.path_type is None


try:
    import dataclasses

    from typer._coercion import RuntimeParam, build_runtime_param
    from typer._param_types import coerce_cli_path
    if {f.name for f in dataclasses.fields(RuntimeParam)} != {"parameter_info", "annotation"}:
        raise ImportError("another RuntimeParam")
except ImportError:  # another typer: its own coercion runs
    _PlainValue = None
else:
    class _PlainValue(RuntimeParam):
        """typer's coercion of a plain ``str``, ``bool`` or ``Path`` value, without its pydantic
        adapter: a ``str`` is kept as is, a ``bool`` too; a ``Path`` is built from the ``str``
        (what pydantic makes of it, ``typer/_param_types.py:229-239``), then goes through typer's
        own ``coerce_cli_path`` (its ``exists``, ``resolve_path``, ``-`` checks and their errors).
        Any other value goes to typer's own runtime coercion (tests/test_cli.py compares the two)."""

        def _coerce_value(self, value, param, ctx):
            kind = self.annotation
            if kind is str and type(value) is str or kind is bool and type(value) is bool:
                return value
            if kind not in (str, bool) and type(value) is str:
                return coerce_cli_path(kind(value), self.parameter_info, path_type=kind, param=param, ctx=ctx)
            return build_runtime_param(param.type_descriptor)._coerce_value(value, param=param, ctx=ctx)


class _Command(typer.core.TyperCommand):
    def get_params(self, ctx):
        return _plain_values(_untyped_flags(super().get_params(ctx)))


class _Group(typer.core.TyperGroup):
    def get_params(self, ctx):
        return _plain_values(_untyped_flags(super().get_params(ctx)))


def flowed(doc: str) -> str:
    """A docstring as help text: each paragraph's lines joined, so the terminal wraps it
    (typer's rich help keeps a docstring's line breaks); paragraphs stay apart."""
    import inspect

    return "\n\n".join(" ".join(p.split()) for p in inspect.cleandoc(doc).split("\n\n"))


class App(typer.Typer):
    """A Typer whose every command goes through :func:`named_errors_fail`, answers ``-h``,
    and shows no type for a flag."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("cls", _Group)
        kwargs["context_settings"] = HELP_OPTIONS | kwargs.get("context_settings", {})
        super().__init__(*args, **kwargs)

    def command(self, *args, **kwargs):
        kwargs.setdefault("cls", _Command)
        kwargs["context_settings"] = HELP_OPTIONS | kwargs.get("context_settings", {})

        def decorator(func):
            doc = {} if "help" in kwargs or not func.__doc__ else {"help": flowed(func.__doc__)}
            super(App, self).command(*args, **kwargs, **doc)(named_errors_fail(func))
            return func

        return decorator
