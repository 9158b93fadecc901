"""The built wheels install in a fresh venv from the wheels alone, under the
distribution name that is ours.

``glyph`` on the package index is someone else's (a 2012 pygame text
library, ``glyph==2.6.5b0``): a ``glyph-mbpp`` that depended on ``glyph``
pulled that in outside this workspace. The distribution is ``glyph-rl`` (the
import package and the console script stay ``glyph``).

Offline, like every test here: the third-party dependencies come from uv's
cache through the lock exported as ``pylock.toml`` (exact URLs and hashes,
which ``uv sync`` has already put in the cache), then the three built wheels
are resolved by ``uv pip install --offline --find-links`` against them. If
the cache lacks the locked wheels (a machine that never ran ``uv sync``), the
test skips and says so.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
UV = shutil.which("uv")
pytestmark = pytest.mark.skipif(UV is None, reason="uv is not on PATH (the README's setup installs it)")

DISTRIBUTION = "glyph-rl"
WHEELS = ("glyph_rl", "glyph_mbpp", "glyph_conventions")


def _cache_miss(stderr: str) -> bool:
    return "network was disabled" in stderr or "not found in the cache" in stderr


def _uv(*args: str, cwd: Path = REPO, cache_may_miss: bool = True) -> subprocess.CompletedProcess:
    """Run uv; a step that only reads uv's cache skips the test on a cache miss (``cache_may_miss``)."""
    # No bytecode compilation (CI sets UV_COMPILE_BYTECODE=1 for the main venv; here it would
    # compile transformers for nothing) and never a Python download.
    env = dict(os.environ, UV_COMPILE_BYTECODE="0", UV_PYTHON_DOWNLOADS="never")
    env.pop("VIRTUAL_ENV", None)
    proc = subprocess.run([UV, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=240)
    if proc.returncode != 0 and cache_may_miss and "--offline" in args and _cache_miss(proc.stderr):
        pytest.skip(f"uv's cache lacks what `uv {args[0]}` needs offline: run `uv sync` once, then this runs "
                    f"offline ({proc.stderr.strip().splitlines()[-1][:200]})")
    if proc.returncode != 0:
        raise AssertionError(f"uv {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return proc


@pytest.fixture(scope="module")
def wheels(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheels")
    _uv("build", "--quiet", "--offline", "--all-packages", "--wheel", "--out-dir", str(out))
    built = sorted(p.name for p in out.glob("*.whl"))
    assert [w.split("-")[0] for w in built] == sorted(WHEELS), built
    return out


def _isolated() -> dict[str, str]:
    env = dict(os.environ, PYTHONNOUSERSITE="1")
    env.pop("PYTHONPATH", None)
    return env


def _run_json(python: Path, code: str, cwd: Path) -> dict:
    """Run ``code`` in the fresh venv, away from the checkout and from PYTHONPATH/user site."""
    proc = subprocess.run([str(python), "-c", code], capture_output=True, text=True, cwd=cwd, env=_isolated(),
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def _fresh_venv(path: Path) -> Path:
    _uv("venv", "--quiet", "--python", sys.executable, str(path))
    return path / "bin" / "python"


METADATA = """
import importlib.metadata as m, importlib.util, json
def missing(name):
    try:
        m.distribution(name)
        return False
    except m.PackageNotFoundError:
        return True
print(json.dumps({
    "version": m.version("glyph-rl"),
    "requires": {d: m.requires(d) for d in ("glyph-mbpp", "glyph-conventions")},
    "no_foreign_glyph": missing("glyph"),
    "files": sorted(str(f) for f in m.files("glyph-rl") if str(f).startswith("glyph/_data/")),
    "testkit": sorted(str(f) for d in ("glyph-rl", "glyph-mbpp", "glyph-conventions") for f in m.files(d)
                      if str(f).split("/")[0] == "testkit" or "testing" in str(f).split("/")),
    "testkit_importable": importlib.util.find_spec("testkit") is not None,
}))
"""


def test_each_wheel_requires_our_distribution_not_the_index_glyph(wheels, tmp_path):
    python = _fresh_venv(tmp_path / "venv")
    _uv("pip", "install", "--quiet", "--offline", "--no-deps", "--python", str(python),
        *map(str, sorted(wheels.glob("*.whl"))))
    got = _run_json(python, METADATA, tmp_path)
    assert got["no_foreign_glyph"], "a distribution named 'glyph' (the index's pygame library) is installed"
    for env, requires in got["requires"].items():
        names = [re.split(r"[<>=!~;\[ (]", r, maxsplit=1)[0] for r in requires]
        assert DISTRIBUTION in names and "glyph" not in names, (env, requires)
    # The packaged data the CLI and renderer read (force-include in pyproject.toml).
    assert "glyph/_data/chat_template.jinja" in got["files"]
    assert "glyph/_data/chat_template_study.jinja" in got["files"]
    assert "glyph/_data/versions.toml" in got["files"]
    # Test and benchmark support (testkit/, at the repository root) stays in the checkout.
    assert got["testkit"] == [] and not got["testkit_importable"], got["testkit"]


def test_wheels_install_with_their_dependencies_in_a_fresh_venv(wheels, tmp_path):
    lock = tmp_path / "pylock.toml"
    _uv("export", "--quiet", "--frozen", "--format", "pylock.toml", "--all-packages", "--no-emit-workspace",
        "--no-dev", "--output-file", str(lock))
    python = _fresh_venv(tmp_path / "venv")
    _uv("pip", "install", "--quiet", "--offline", "--python", str(python), "-r", str(lock))
    # The wheels are resolved (not --no-deps): glyph-mbpp's requirement must be met by our wheel
    # from --find-links; were it 'glyph', the offline resolver would fail here (or, online, pull 2.6.5b0).
    # Every third-party requirement is already installed, so a failure here is never a cache miss.
    _uv("pip", "install", "--quiet", "--offline", "--python", str(python), "--find-links", str(wheels),
        "glyph-mbpp", "glyph-conventions", cache_may_miss=False)
    _uv("pip", "check", "--quiet", "--python", str(python))
    probe = """
import importlib.metadata as m, json, glyph, glyph_mbpp, glyph_conventions
algos = {ep.name: ep.value for ep in m.entry_points(group="prime_rl.algorithms")}  # loading needs prime_rl
dists = sorted(d.metadata["Name"] for d in m.distributions())
print(json.dumps({"glyph": glyph.__file__, "algos": algos, "dists": dists}))
"""
    got = _run_json(python, probe, tmp_path)
    assert Path(got["glyph"]).is_relative_to(tmp_path / "venv"), got["glyph"]
    assert got["algos"] == {"glyph_grpo": "glyph.predict.prime_rl_config:GlyphGRPOAlgoConfig",
                            "predict": "glyph.predict.prime_rl_config:PredictAlgoConfig",
                            "glyph_echo": "glyph.predict.echo_config:GlyphEchoAlgoConfig",
                            "predict_echo": "glyph.predict.echo_config:PredictEchoAlgoConfig"}
    assert "glyph" not in got["dists"] and DISTRIBUTION in got["dists"]
    cli = subprocess.run([str(tmp_path / "venv" / "bin" / "glyph"), "--help"], capture_output=True, text=True,
                         cwd=tmp_path, env=_isolated(), timeout=120)
    assert cli.returncode == 0 and "Usage: glyph" in cli.stdout, cli.stderr[-2000:]


ENVIRONMENTS = {"glyph_mbpp": "glyph-mbpp", "glyph_conventions": "glyph-conventions"}
HUB_SECTIONS = ("## Overview", "## Install", "## Datasets", "## Task", "## Quickstart", "## Metrics")
"""The Environments Hub README template's sections (verifiers a60a606 ``legacy/scripts/init.py:6-62``:
Overview, Datasets, Task, Quickstart, config, Metrics), plus how to install the wheels."""


def test_each_environment_declares_tags_license_and_the_hubs_readme_sections():
    import tomllib

    for folder, env_id in ENVIRONMENTS.items():
        project = tomllib.loads((REPO / "environments" / folder / "pyproject.toml").read_text())["project"]
        assert project["name"] == env_id and project["license"] == {"text": "MIT"}, project
        tags = project["tags"]
        assert isinstance(tags, list) and {"train", "eval"} <= set(tags), tags
        readme = (REPO / "environments" / folder / "README.md").read_text()
        heads = [line for line in readme.splitlines() if line.startswith("## ")]
        assert [h for h in heads if h in HUB_SECTIONS] == list(HUB_SECTIONS), heads
        for field in ("**Environment ID**", "**Tags**", "**Primary dataset**", "**Source links**",
                      "**Split sizes**", "**Type**", "**Rubric overview**", "`reward` (`passed`)"):
            assert field in readme, (folder, field)
        assert ", ".join(project["tags"]) in readme, (folder, "the README's tags are not the pyproject's")


def _install_line(folder: str) -> list[str]:
    """The README's command that installs the environment's wheel with glyph-rl's."""
    readme = (REPO / "environments" / folder / "README.md").read_text()
    [line] = [x for x in readme.splitlines() if x.startswith("uv pip install dist/")]
    return line.split("#")[0].split()


@pytest.mark.parametrize("folder", sorted(ENVIRONMENTS))
def test_the_readmes_install_line_installs_the_environment_and_its_wheel_alone_says_what_is_missing(
        wheels, tmp_path, folder):
    """The environment README's install line, run as written but against this test's build (``dist/`` is
    its wheel folder; offline, the third-party requirements installed from the lock first): it installs
    and the environment imports. Its wheel alone fails naming ``glyph-rl``, which no registry has."""
    import glob

    lock = tmp_path / "pylock.toml"
    _uv("export", "--quiet", "--frozen", "--format", "pylock.toml", "--all-packages", "--no-emit-workspace",
        "--no-dev", "--output-file", str(lock))
    python = _fresh_venv(tmp_path / "venv")
    _uv("pip", "install", "--quiet", "--offline", "--python", str(python), "-r", str(lock))
    line = _install_line(folder)
    assert line[:3] == ["uv", "pip", "install"] and len(line) == 5, line
    files = [glob.glob(str(wheels / arg.removeprefix("dist/"))) for arg in line[3:]]
    assert all(len(f) == 1 for f in files), (line, files)
    alone = subprocess.run([UV, "pip", "install", "--offline", "--python", str(python), files[1][0]],
                           capture_output=True, text=True, env=dict(os.environ, UV_PYTHON_DOWNLOADS="never"),
                           timeout=240)
    assert alone.returncode != 0 and "glyph-rl" in alone.stderr, alone.stderr[-2000:]
    _uv("pip", "install", "--quiet", "--offline", "--python", str(python), *(f[0] for f in files),
        cache_may_miss=False)
    got = _run_json(python, f"import json, {folder}; print(json.dumps({folder}.__all__))", tmp_path)
    assert got, got
