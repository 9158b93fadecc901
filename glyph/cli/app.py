"""The ``glyph`` command: the Typer app, with each module's commands and groups
registered on it. Command modules never import this one.

A command's module is imported when the command runs (or a help page or a
completion lists it), not when the app starts: ``glyph grade`` never imports
the flywheel's options model (pydantic) or any other group's code. Each
command is registered exactly as an eager ``app.command()`` / ``app.add_typer``
would register it (:func:`_built`), so its options, help and error handling
are the same."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator, MutableMapping
from typing import Annotated

import typer
import typer.main

from glyph.cli.common import App, _Group

COMMANDS: dict[str, tuple[str, str | None]] = {
    "grade": ("grade", "grade"), "demo": ("run", "demo"), "serve": ("run", "serve"), "report": ("report", "report"),
    "sandbox": ("sandbox", None), "data": ("data", None), "prime-rl": ("prime_rl", None),
    "conventions": ("conventions", None), "flywheel": ("flywheel", None), "study": ("study", None),
    "train": ("train", None)}
"""Each top-level command and group, in the order help lists them: the ``glyph.cli`` module that
holds it, and the command's function there (None: a group, the module's ``app``)."""


def _register(app: App, name: str) -> None:
    """Register ``COMMANDS[name]`` on ``app`` as an eager ``app.command()`` / ``app.add_typer`` would."""
    module, function = COMMANDS[name]
    code = importlib.import_module(f"glyph.cli.{module}")
    if function is None:
        app.add_typer(code.app, name=name)
    else:
        app.command()(getattr(code, function))


def _built(name: str):
    """The click command ``COMMANDS[name]`` registers, built by typer as for any app's command."""
    one = App()
    _register(one, name)
    return typer.main.get_group(one).commands[name]


class _Commands(MutableMapping):
    """A group's commands by name, each built on first use: iterating gives the
    names only (typer's "did you mean" and help's listing read them), looking a name up builds it."""

    def __init__(self, eager: MutableMapping) -> None:
        self._built = dict(eager)

    def __getitem__(self, name: str):
        if name not in self._built:
            if name not in COMMANDS:
                raise KeyError(name)
            self._built[name] = _built(name)
        return self._built[name]

    def __setitem__(self, name: str, command) -> None:
        self._built[name] = command

    def __delitem__(self, name: str) -> None:
        del self._built[name]

    def __iter__(self) -> Iterator[str]:
        return iter(dict.fromkeys([*COMMANDS, *self._built]))

    def __len__(self) -> int:
        return len(set(COMMANDS) | set(self._built))


class _LazyGroup(_Group):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.commands = _Commands(self.commands)

    def list_commands(self, ctx) -> list[str]:
        return list(self.commands)  # names, in order; typer's reads each value, which would build them all


app = App(add_completion=False, no_args_is_help=True, cls=_LazyGroup,
          help="glyph: sandboxed grading, the glyph-mbpp environment, PREDICT and the flywheel.")


def _version(value: bool) -> None:
    """glyph's distribution and version, and the verifiers it runs with (installed metadata only)."""
    if value:
        from importlib.metadata import PackageNotFoundError, version

        def of(dist: str) -> str:
            try:
                return version(dist)
            except PackageNotFoundError:
                return "not installed"

        print(f"glyph-rl {of('glyph-rl')} (verifiers {of('verifiers')})")
        raise typer.Exit(0)


@app.callback()
def _main(version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                                help="print glyph's version (and verifiers') and exit")] = False) -> None:
    """glyph: sandboxed grading, the glyph-mbpp environment, PREDICT and the flywheel."""


def main() -> None:  # pragma: no cover
    app()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
