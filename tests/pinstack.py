"""The pinned PRIME-RL stack for tests: verifiers ``a60a606`` (0.3.1.dev62) and
PRIME-RL ``559b447`` from ``../shared/vendor``, offline, on Python 3.11.

PRIME-RL requires Python 3.12 to install, so its source runs from
``PYTHONPATH`` (``src`` and ``packages/prime-rl-configs/src``) in a venv that
holds the pin's verifiers wheel, CPU torch and the packages its orchestrator,
config and loss code import, at the versions PRIME-RL's own pyproject asks
for. glyph, glyph-mbpp and glyph-conventions are installed into that venv
*after* verifiers, as a PRIME-RL user would, and the venv is checked to still
hold the pin's verifiers. The venv is cached (keyed by everything that goes into it); the
PRIME-RL tree is unpacked fresh per session and patched with ``patches/``.

Used by ``tests/test_pin.py`` (in the main venv, verifiers 0.4.0), which runs
PRIME-RL's own unit tests and glyph's ``tests/pin`` inside this stack.
"""

from __future__ import annotations

import fcntl
import glob
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tomllib
from pathlib import Path

from glyph import pins

REPO = Path(__file__).resolve().parent.parent
PIN_VERIFIERS_VERSION = pins.VERIFIERS_VERSION
VERIFIERS_WHEEL = f"verifiers-{PIN_VERIFIERS_VERSION}-py3-none-any.whl"
PRIME_RL_TARBALL = f"prime-rl-{pins.PRIME_RL_COMMIT[:7]}.tar.gz"
# What PRIME-RL's orchestrator, configs and loss import on CPU (versions from its pyproject).
PRIME_RL_PACKAGES = (
    "msgspec",
    "numpy",
    "wandb",
    "jaxtyping",
    "beartype",
    "setproctitle",
    "loguru",
    "pyzmq",
    "orjson",
    "tenacity",
    "aiolimiter",
    "pandas",
    "pybase64",
    "transformers",
    "prime-pydantic-config",
    "renderers",
)
TEST_PACKAGES = ("pytest>=8", "pytest-timeout>=2.3", "pytest-asyncio>=0.23", "psutil")


def vendor_dir() -> Path | None:
    """``$GLYPH_VENDOR_DIR`` or ``../shared/vendor`` beside the checkout, if it holds both files."""
    path = Path(os.environ.get("GLYPH_VENDOR_DIR") or REPO.parent / "shared" / "vendor")
    if (path / VERIFIERS_WHEEL).is_file() and (path / PRIME_RL_TARBALL).is_file():
        return path
    return None


def _prime_rl_requirements(tarball: Path) -> list[str]:
    """PRIME-RL's own requirement strings for the packages we install."""
    with tarfile.open(tarball) as tar:
        member = next(
            m
            for m in tar.getmembers()
            if m.name.rstrip("/").endswith("pyproject.toml") and m.name.count("/") <= 1
        )
        deps = tomllib.loads(tar.extractfile(member).read().decode())["project"]["dependencies"]
    # PRIME-RL takes renderers from a submodule; the stack takes the PyPI release versions.toml names.
    versions = tomllib.loads((REPO / "configs" / "versions.toml").read_text())
    wanted = {"renderers": f"renderers=={versions['renderers']['version']}"}
    for dep in deps:
        name = re.split(r"[<>=!~\[; ]", dep, maxsplit=1)[0].lower()
        if name in PRIME_RL_PACKAGES:
            wanted.setdefault(name, dep)
    return [wanted.get(name, name) for name in PRIME_RL_PACKAGES]


def torch_requirement() -> str:
    """A CPU torch: ``$GLYPH_TORCH`` if set, else a local CPU wheel from pip's
    find-links (this machine's ``/opt/wheels``), else ``torch`` from the index."""
    if os.environ.get("GLYPH_TORCH"):
        return os.environ["GLYPH_TORCH"]
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    dirs = ["/opt/wheels"]
    try:
        out = subprocess.run(
            [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, timeout=30
        ).stdout
        dirs += [
            d
            for line in out.splitlines()
            if "find-links" in line
            for d in line.split("=", 1)[1].strip("'\" ").split()
        ]
    except (OSError, subprocess.SubprocessError):
        pass
    for d in dirs:
        wheels = sorted(glob.glob(os.path.join(d.removeprefix("file://"), f"torch-*+cpu-{tag}-*.whl")))
        if wheels:
            return wheels[-1]
    return "torch"


def _uv() -> str:
    uv = shutil.which("uv")
    if uv is None:
        raise RuntimeError("uv is not on PATH (the README's setup installs it)")
    return uv


def _cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "glyph" / "pin"


def venv_spec(vendor: Path) -> dict:
    return {
        "python": sys.version.split()[0],
        "wheel": hashlib.sha256((vendor / VERIFIERS_WHEEL).read_bytes()).hexdigest(),
        "prime_rl": _prime_rl_requirements(vendor / PRIME_RL_TARBALL),
        "torch": torch_requirement(),
        "tests": TEST_PACKAGES,
        "repo": str(REPO),
        "bytecode": True,
        "glyph": hashlib.sha256(
            (REPO / "pyproject.toml").read_bytes()
            + (REPO / "environments/glyph_mbpp/pyproject.toml").read_bytes()
            + (REPO / "environments/glyph_conventions/pyproject.toml").read_bytes()
        ).hexdigest(),
    }


def build_venv(vendor: Path, log=print) -> Path:
    """The cached venv's python; built on first use (a few minutes without a uv cache)."""
    spec = venv_spec(vendor)
    key = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]
    root = _cache_root()
    root.mkdir(parents=True, exist_ok=True)
    venv = root / f"venv-{key}"
    python = venv / "bin" / "python"
    with open(root / f"venv-{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (venv / ".complete").is_file():
            return python
        shutil.rmtree(venv, ignore_errors=True)
        uv = _uv()
        env = dict(os.environ, UV_PYTHON_DOWNLOADS="never")
        run = lambda *args: subprocess.run([uv, *args], check=True, env=env, capture_output=True, text=True)  # noqa: E731
        log(f"building the pinned PRIME-RL test venv at {venv}")
        run("venv", "--quiet", "--python", sys.executable, str(venv))
        # Bytecode up front: with PYTHONDONTWRITEBYTECODE (set on these machines) every process would
        # otherwise recompile transformers and verifiers, seconds each.
        pip = ("pip", "install", "--quiet", "--compile-bytecode", "--python", str(python))
        run(*pip, str(vendor / VERIFIERS_WHEEL), spec["torch"], *spec["prime_rl"], *TEST_PACKAGES)
        # glyph goes in as a PRIME-RL user installs it: into the env that already has the pin's verifiers.
        run(*pip, "-e", str(REPO), "-e", str(REPO / "environments" / "glyph_mbpp"),
            "-e", str(REPO / "environments" / "glyph_conventions"))
        version = subprocess.run(
            [str(python), "-c", "import importlib.metadata as m; print(m.version('verifiers'))"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        if version != PIN_VERIFIERS_VERSION:
            raise RuntimeError(f"installing glyph replaced the pin's verifiers: {version}")
        (venv / ".complete").write_text(json.dumps(spec, indent=1))
    return python


def unpack_prime_rl(vendor: Path, dest: Path, patch: bool = True) -> Path:
    """PRIME-RL's source at the pin under ``dest``, patched with ``patches/`` unless ``patch`` is False."""
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(vendor / PRIME_RL_TARBALL) as tar:
        tar.extractall(dest, filter="data")
    entries = [p for p in dest.iterdir()]
    root = entries[0] if len(entries) == 1 and entries[0].is_dir() and not (dest / "src").exists() else dest
    if patch:
        from glyph.predict import pin

        pin.apply_patches(root)
    return root


def pythonpath(prime_rl_root: Path) -> str:
    return os.pathsep.join(
        [str(prime_rl_root / "src"), str(prime_rl_root / "packages" / "prime-rl-configs" / "src")]
    )
