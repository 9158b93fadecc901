"""The cold start's one file (``glyph.envs.bundle``): it carries the shipped
set byte for byte with a checked-hash pyc per module, ``BOOT`` unpacks it
and imports from the pycs, a pyc never stands in for other source, and the
command line survives a runtime that runs it through a shell."""

from __future__ import annotations

import importlib.util
import shlex
import subprocess
import sys

import pytest

from glyph.envs import bundle
from glyph.envs.mbpp.harness import BUNDLE, COLD, PROGRAM_DIR, SHIPPED


def _unpack_and(tmp_path, code: str, files: dict[str, bytes] | None = None) -> subprocess.CompletedProcess:
    """Write a bundle (``files`` or glyph's own) and run ``UNPACK`` then ``code`` on it, as ``COLD`` runs
    ``BOOT``: this Python, isolated, without site, writing no bytecode, in ``tmp_path``."""
    data = bundle.build() if files is None else bundle.pack(files)
    (tmp_path / BUNDLE).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / BUNDLE).write_bytes(data)
    argv = [sys.executable, "-I", "-S", "-B", "-v", "-c", bundle.UNPACK + code, BUNDLE, PROGRAM_DIR]
    return subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False)


def test_the_bundle_holds_the_shipped_set_and_a_checked_hash_pyc_for_each_module():
    files = bundle.unpack(bundle.build())
    assert {t: files[t] for t in SHIPPED} == {t: src.read_bytes() for t, src in SHIPPED.items()}
    pycs = {importlib.util.cache_from_source(t): t for t in SHIPPED if t.endswith(".py")}
    assert set(files) == set(SHIPPED) | set(pycs)
    for pyc, source in pycs.items():
        head = files[pyc][:16]
        assert head[:4] == importlib.util.MAGIC_NUMBER, pyc
        assert int.from_bytes(head[4:8], "little") == 0b11, pyc  # hash-based, checked (PEP 552)
        assert head[8:16] == importlib.util.source_hash(files[source]), pyc


def test_boot_unpacks_every_file_and_imports_the_program_from_its_pycs(tmp_path):
    proc = _unpack_and(tmp_path, "import glyph.agent.program, glyph.grading\n")
    assert proc.returncode == 0, proc.stderr
    for name, data in bundle.unpack(bundle.build()).items():
        assert (tmp_path / PROGRAM_DIR / name).read_bytes() == data, name
    for module in ("glyph/agent/program", "glyph/agent/profiles/glyph", "glyph/grading", "glyph/sandbox/client"):
        pyc = importlib.util.cache_from_source(str(tmp_path / PROGRAM_DIR / f"{module}.py"))
        assert f"# code object from '{pyc}'" in proc.stderr, f"{module} was not imported from its pyc"


def test_a_pyc_never_stands_in_for_other_source(tmp_path):
    """A source that differs from the one its pyc was compiled from is compiled
    again: the pyc's hash is checked at every import."""
    files = bundle.unpack(bundle.build())
    files["glyph/outcomes.py"] += b"\nSTAND_IN = 'the source, not the pyc'\n"
    proc = _unpack_and(tmp_path, "import glyph.outcomes as o\nprint(o.STAND_IN)\n", files)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "the source, not the pyc"
    loaded = [line for line in proc.stderr.splitlines()
              if line.startswith("# code object from") and "outcomes" in line]
    assert loaded and all(".pyc" not in line for line in loaded), loaded  # compiled from the source given


def test_the_cold_command_survives_a_shell(tmp_path):
    """verifiers' prime and e2b runtimes run ``shlex.join(argv)`` through a
    shell: ``BOOT``'s lines and quotes must reach Python as they are."""
    shell = ["sh", "-c", f"printf '%s\\0' {shlex.join(COLD)}"]
    words = subprocess.run(shell, capture_output=True, check=True).stdout
    assert words.decode().split("\0")[:-1] == COLD


def test_pack_and_unpack_agree_and_unpack_refuses_trailing_bytes():
    files = {"a/b.py": b"x = 1\n", "c": b"", "d/e": bytes(range(256))}
    assert bundle.unpack(bundle.pack(files)) == files
    with pytest.raises(ValueError, match="4 bytes after its last file"):
        bundle.unpack(bundle.pack(files) + b"junk")


def test_boot_writes_no_pyc_another_python_would_read(tmp_path):
    """A runtime whose python3 is another version gets the sources alone (its own
    pycs it would compile and, under -B, not write)."""
    files = bundle.unpack(bundle.build())
    tag = sys.implementation.cache_tag
    other = {name.replace(f".{tag}.pyc", ".cpython-399.pyc"): data for name, data in files.items()}
    proc = _unpack_and(tmp_path, "import glyph.agent.profiles.glyph\n", other)
    assert proc.returncode == 0, proc.stderr
    written = {p.relative_to(tmp_path / PROGRAM_DIR).as_posix() for p in (tmp_path / PROGRAM_DIR).rglob("*")
               if p.is_file()}
    assert written == set(SHIPPED)
