"""``uv run pytest -m quick``: tests/conftest.py marks every test ``quick`` or ``slow`` from two lists;
they must name files and tests that exist (a renamed test would silently turn quick), and both
markers must be declared (``--strict-markers`` would refuse them otherwise)."""

import ast
import tomllib
from pathlib import Path

import conftest

TESTS = Path(__file__).resolve().parent


def test_the_slow_lists_name_files_and_tests_that_exist():
    for name in conftest.SLOW_FILES:
        assert (TESTS / name).is_file(), name
    for file, names in conftest.SLOW_TESTS.items():
        assert file not in conftest.SLOW_FILES, file
        defined = {n.name for n in ast.parse((TESTS / file).read_text()).body if isinstance(n, ast.FunctionDef)}
        for name in names:
            assert name.split("[")[0] in defined, (file, name)


def test_quick_and_slow_are_declared_markers():
    options = tomllib.loads((TESTS.parent / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    declared = {m.split(":")[0] for m in options["markers"]}
    assert {"quick", "slow"} <= declared
