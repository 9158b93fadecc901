"""The pinned PRIME-RL stack for tests: verifiers ``a60a606`` (0.3.1.dev62) and
PRIME-RL ``559b447`` from ``../shared/vendor``, offline, on Python 3.11.

The environment is the one REPRODUCTION.md's offline route builds, built by
running that document's ``bash install`` block as written (``GLYPH`` and
``VENDOR`` set as it says; ``TORCH_WHEEL`` set where a local CPU torch wheel
is found, as it says): PRIME-RL's source from the tarball on ``PYTHONPATH``,
a venv with the pin's verifiers wheel, a CPU torch and the packages the
document names, then glyph, glyph-mbpp and glyph-conventions installed after
verifiers, and glyph's patches applied. A package the document forgets is
missing here too, and the tests that need it fail. Only the test runner's own
packages (``TEST_PACKAGES``) are added, and the venv is checked to still hold
the pin's verifiers. The venv is cached (keyed by the block's text and
everything else that goes into it); the PRIME-RL trees the tests run are
unpacked fresh per session and patched with ``patches/``.

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
import shlex
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
DOCUMENT = REPO / "REPRODUCTION.md"
INSTALL_BLOCK = re.compile(r"^```bash install\n(.*?)^```$", re.MULTILINE | re.DOTALL)
TEST_PACKAGES = ("pytest>=8", "pytest-timeout>=2.3", "pytest-asyncio>=0.23")
"""The test runner's packages, the only ones the stack adds to what REPRODUCTION.md installs."""


def vendor_dir() -> Path | None:
    """``$GLYPH_VENDOR_DIR`` or ``../shared/vendor`` beside the checkout, if it holds both files."""
    path = Path(os.environ.get("GLYPH_VENDOR_DIR") or REPO.parent / "shared" / "vendor")
    if (path / VERIFIERS_WHEEL).is_file() and (path / PRIME_RL_TARBALL).is_file():
        return path
    return None


def install_block() -> str:
    """REPRODUCTION.md's offline install, the one block tagged ``bash install``."""
    found = INSTALL_BLOCK.findall(DOCUMENT.read_text(encoding="utf-8"))
    if len(found) != 1:
        raise RuntimeError(f"{DOCUMENT.name}: {len(found)} blocks tagged `bash install`, not one")
    return found[0]


def documented_requirements() -> dict[str, str]:
    """The requirement strings the install block names beside the pin's verifiers wheel (the packages
    PRIME-RL's CPU code imports), by package name (lower case)."""
    commands = install_block().replace("\\\n", " ").splitlines()
    [command] = [c for c in commands if VERIFIERS_WHEEL in c]
    words = shlex.split(command, comments=True)
    after = words[next(i for i, w in enumerate(words) if w.endswith(VERIFIERS_WHEEL)) + 1:]
    return {re.split(r"[<>=!~\[; ]", w, maxsplit=1)[0].lower(): w for w in after}


def prime_rl_requirements(tarball: Path) -> dict[str, str]:
    """PRIME-RL's own requirement strings at the pin (its pyproject), by package name (lower case);
    the first where it names a package twice."""
    with tarfile.open(tarball) as tar:
        member = next(
            m
            for m in tar.getmembers()
            if m.name.rstrip("/").endswith("pyproject.toml") and m.name.count("/") <= 1
        )
        deps = tomllib.loads(tar.extractfile(member).read().decode())["project"]["dependencies"]
    out: dict[str, str] = {}
    for dep in deps:
        out.setdefault(re.split(r"[<>=!~\[; ]", dep, maxsplit=1)[0].lower(), dep)
    return out


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
        "tarball": hashlib.sha256((vendor / PRIME_RL_TARBALL).read_bytes()).hexdigest(),
        "install": install_block(),
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
    """The cached venv's python; built on first use by REPRODUCTION.md's install block (a few
    minutes without a uv cache)."""
    spec = venv_spec(vendor)
    key = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]
    root = _cache_root()
    root.mkdir(parents=True, exist_ok=True)
    build = root / f"build-{key}"
    python = build / "prime-rl" / ".venv" / "bin" / "python"
    with open(root / f"build-{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (build / ".complete").is_file():
            return python
        shutil.rmtree(build, ignore_errors=True)
        build.mkdir()
        uv = _uv()
        # The document's variables, as it says to set them; bytecode up front (an environment variable,
        # the commands unchanged): with PYTHONDONTWRITEBYTECODE (set on these machines) every process
        # would otherwise recompile transformers and verifiers, seconds each.
        env = dict(os.environ, GLYPH=str(REPO), VENDOR=str(vendor), UV_PYTHON_DOWNLOADS="never",
                   UV_COMPILE_BYTECODE="1", PATH=os.pathsep.join([str(Path(uv).parent), os.environ["PATH"]]))
        for name in ("VIRTUAL_ENV", "PYTHONPATH", "TORCH_WHEEL"):
            env.pop(name, None)
        if spec["torch"] != "torch":
            env["TORCH_WHEEL"] = spec["torch"]
        log(f"building the pinned PRIME-RL test venv at {python.parent.parent} from {DOCUMENT.name}")
        proc = subprocess.run(["bash", "-euo", "pipefail", "-c", install_block()], cwd=build, env=env,
                              capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"{DOCUMENT.name}'s install block failed (exit {proc.returncode}):\n"
                               f"{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
        subprocess.run([uv, "pip", "install", "--quiet", "--compile-bytecode", "--python", str(python),
                        *TEST_PACKAGES], check=True, env=env, capture_output=True, text=True)
        version = subprocess.run(
            [str(python), "-c", "import importlib.metadata as m; print(m.version('verifiers'))"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        if version != PIN_VERIFIERS_VERSION:
            raise RuntimeError(f"installing glyph replaced the pin's verifiers: {version}")
        (build / ".complete").write_text(json.dumps(spec, indent=1))
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
