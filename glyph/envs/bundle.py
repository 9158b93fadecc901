"""The cold start's one file: the shipped set (``glyph.layers.shipped_files``)
with its bytecode, written into a rollout's runtime as one file and unpacked
there by a few lines of stdlib Python (``BOOT``) that then run the program.

Why one file: a container runtime writes each file with a command of its
own (verifiers' container runtime: a ``docker exec ... cat > path`` per
``Runtime.write``, ``verifiers/v1/runtimes/container.py:308-320``; the
prime, modal and e2b runtimes an upload per file), and the shipped set is
23 files.

Why bytecode: without it each cold start compiles every module it imports
(measured here: importing the program, the study profile and the grader
from source 76 ms of CPU, from this bytecode 55 ms). The bytecode is this
Python's (``sys.implementation.cache_tag``), as checked-hash pycs (PEP 552):
a runtime whose ``python3`` is another version looks for another file name
and compiles the source as before, and every import checks the source's
hash against the pyc's, so a pyc never stands in for other source.

Format: one line of JSON, ``[[path, size], ...]`` (paths relative to the
program folder), then the files' bytes in that order. Not a zip: ``zipfile``
costs 8-12 ms of CPU to import in the runtime (it imports pathlib, bz2,
lzma, threading, shutil), and the program imports ``json`` anyway.
"""

from __future__ import annotations

import importlib.util
import json
import py_compile
import tempfile
from functools import lru_cache
from pathlib import Path

from glyph.layers import shipped_files

UNPACK = """\
import json, os, sys
bundle, root = sys.argv[1], sys.argv[2]
with open(bundle, "rb") as f:
    head, _, body = f.read().partition(b"\\n")
at, tag = 0, "." + sys.implementation.cache_tag + ".pyc"
for name, size in json.loads(head):
    at += size
    if name.endswith(".pyc") and not name.endswith(tag):
        continue  # another Python's: it would never read it
    path = os.path.join(root, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as out:
        out.write(body[at - size:at])
sys.path.insert(0, os.path.abspath(root))
"""
BOOT = UNPACK + """\
program = __import__(sys.argv[3], fromlist=["main"])
sys.argv = [program.__file__]
sys.exit(program.main())
"""
"""Run as ``python3 -I -S -B -c BOOT BUNDLE ROOT MODULE`` (``argv``): unpack
``BUNDLE`` under ``ROOT`` (the shipped set's folder; made as needed; a pyc
only where this Python's cache tag names it), then
import the program ``MODULE`` from there, its bytecode included, and run it
as the warm start does (``glyph.agent.warm``: ``argv`` is the program's
path, ``main()``'s status the exit status). The programs read their
configuration from their environment, never from ``argv``."""


def argv(python: str, bundle: str, root: str, module: str = "glyph.agent.program") -> list[str]:
    """The cold start's command line: ``python`` isolated (-I), without site
    (-S: the shipped set is stdlib only), writing no bytecode (-B), running
    ``BOOT`` on ``bundle`` into ``root``, then ``module``'s ``main``."""
    return [python, "-I", "-S", "-B", "-c", BOOT, bundle, root, module]


@lru_cache(maxsize=1)
def build() -> bytes:
    """The bundle: every shipped file, and for each ``.py`` its checked-hash
    pyc where this Python would look for it (``__pycache__/NAME.TAG.pyc``).
    Built once per process."""
    files: dict[str, bytes] = {}
    with tempfile.TemporaryDirectory(prefix="glyph-bundle-") as tmp:
        for target, source in shipped_files().items():
            files[target] = source.read_bytes()
            pyc = importlib.util.cache_from_source(target)
            cfile = Path(tmp) / pyc
            py_compile.compile(str(source), cfile=str(cfile), dfile=target, doraise=True,
                               invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH)
            files[pyc] = cfile.read_bytes()
    return pack(files)


def pack(files: dict[str, bytes]) -> bytes:
    """``files`` (``{path: bytes}``, paths relative to the program folder) in the bundle's format."""
    head = json.dumps([[name, len(data)] for name, data in files.items()]).encode()
    return b"".join([head, b"\n", *files.values()])


def unpack(data: bytes) -> dict[str, bytes]:
    """What ``UNPACK`` writes, as ``{path: bytes}``: the format's other reader,
    for tests and tools (``UNPACK`` itself cannot import glyph)."""
    head, _, body = data.partition(b"\n")
    out, at = {}, 0
    for name, size in json.loads(head):
        out[name] = body[at:at + size]
        at += size
    if at != len(body):
        raise ValueError(f"bundle: {len(body) - at} bytes after its last file")
    return out
