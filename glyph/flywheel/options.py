"""The options of a flywheel run, declared once: :class:`RunOptions`.

Each field is one option with its default, its description (the CLI's help)
and its bounds; its flag is :func:`flag` of its name. The CLI's ``run``,
``replicate`` and ``sweep`` flags are generated from the fields, the runner
takes a ``RunOptions``, and the store keeps and compares its
:meth:`~RunOptions.config`.

A run's identity (:class:`RunConfig`, the run directory's ``config.json``)
is every field but those marked :data:`CALL` (how calls are made: never
stored, so never blocking a resume), with those marked :class:`Only` stored
as ``null`` where their agent or writer kind is not in use.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, create_model

from glyph.errors import ConfigError


@dataclass(frozen=True)
class Only:
    """Marks an option that applies only when option ``option`` is ``value``."""

    option: str
    value: str


@dataclass(frozen=True)
class _Call:
    """Marks an option that changes how model calls are made, never the results."""


CALL = _Call()
OPENAI_AGENT = Only("agent", "openai")
REFERENCE_AGENT = Only("agent", "reference")
OPENAI_WRITER = Only("writer", "openai")
AA_GATE = Only("gate", "aa")
Kind = Literal["reference", "openai"]


class OptionsError(ConfigError):
    """Options that cannot make a run; the message names the flag."""


def flag(name: str) -> str:
    """The command-line flag of option ``name``: ``max_rounds`` -> ``--max-rounds``."""
    return "--" + name.replace("_", "-")


class RunOptions(BaseModel):
    """Everything ``glyph flywheel run`` takes, but its output directory; in the
    order of its ``--help`` (the result fields' order is ``config.json``'s)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    K: int = Field(8, ge=1, description="rollouts per task in every phase")
    seed: int = Field(0, description="run seed (reference agent noise; OpenAI request seeds)")
    tasks: Optional[Path] = Field(None, description="a conventions JSONL file (default: glyph's own data file)")
    agent: Kind = Field("reference", description="reference (offline, free) or openai (an endpoint)")
    base_url: Annotated[Optional[str], OPENAI_AGENT] = Field(
        None, description="an OpenAI-compatible endpoint's URL, ending in /v1 (key: $OPENAI_API_KEY)")
    model: Annotated[Optional[str], OPENAI_AGENT] = Field(None, description="model name at --base-url")
    temperature: Annotated[float, OPENAI_AGENT] = Field(1.0, description="agent sampling temperature (openai)")
    max_tokens: Annotated[int, OPENAI_AGENT] = Field(2048, description="agent max tokens per reply (openai)")
    writer: Kind = Field("reference", description="lesson writer: reference or openai")
    writer_base_url: Annotated[Optional[str], OPENAI_WRITER] = Field(
        None, description="writer endpoint (default: --base-url)")
    writer_model: Annotated[Optional[str], OPENAI_WRITER] = Field(
        None, description="writer model (default: --model)")
    gate: Literal["band", "paired", "aa"] = Field(
        "band", description="band (the original flywheel's rule, the default): gain > 1.96*sqrt(0.25/(n*K)); "
                            "paired: the per-task t interval's lower bound > 0; aa: gain > the measured A/A "
                            "band, which glyph recommends (docs/flywheel.md)")
    aa_runs: Annotated[int, AA_GATE] = Field(
        20, ge=2, description="--gate aa: no-lesson re-rolls of the holdout that measure the A/A band")
    max_rounds: int = Field(20, ge=1, description="at most this many lesson rounds")
    concurrency: Annotated[int, CALL] = Field(8, ge=1, description="threads for model calls and grading")
    p_lucky: Annotated[float, REFERENCE_AGENT] = Field(
        0.1, ge=0, le=1, description="reference agent noise: chance of the fixed reference without the lesson")
    p_slip: Annotated[float, REFERENCE_AGENT] = Field(
        0.05, ge=0, le=1, description="reference agent noise: chance of the broken reference with the lesson")
    noise_draw: Literal["rollout", "task"] = Field(
        "rollout", description="reference agent noise: one draw per rollout (independent), or per task and "
                               "phase (a task's K rollouts alike: correlated); reference agent only")
    timeout: Annotated[float, CALL] = Field(120.0, description="seconds per model request")
    retries: Annotated[int, CALL] = Field(
        6, ge=0, description="retries of a timed-out, rate-limited (429) or 5xx model call before its rollout "
                              "is excluded (an endpoint that cannot be reached or answers another 4xx stops "
                              "the run at once)")
    backoff: Annotated[float, CALL] = Field(
        0.5, ge=0, description="seconds before a failed model call's first retry, doubling for each next one "
                               "(at most 8 s); a server's Retry-After wins")
    retry_excluded: Annotated[bool, CALL] = Field(
        False, description="on resume, request again the rollouts stored as excluded (their model call had "
                           "failed)")
    quiet: Annotated[bool, CALL] = Field(False, description="no progress bars")

    def replace(self, **changes) -> RunOptions:
        """A copy with ``changes``, validated."""
        return type(self).model_validate(self.model_dump() | changes)

    def tasks_path(self) -> Path:
        """``tasks``, else glyph's own conventions file."""
        from glyph.data import conventions
        return self.tasks or conventions.DATA_FILE

    def check(self) -> None:
        """Raise :class:`OptionsError` naming the flag when the options cannot make a run:
        a missing task file, an endpoint URL that is not one, a missing endpoint, or an
        option given where nothing reads it (``--base-url`` with the reference agent and
        writer: the run would silently ignore it)."""
        path = self.tasks_path()
        if not path.is_file():
            raise OptionsError(f"--tasks {path}: no such file")
        for name, field in type(self).model_fields.items():
            only = _marker(field, Only)
            if only is None or getattr(self, name) == field.default or self.applies(name):
                continue
            also = " (or --writer openai)" if name in _WRITER_DEFAULTS else ""
            raise OptionsError(f"{flag(name)} goes with {flag(only.option)} {only.value}{also}; without it "
                               f"{flag(only.option)} is {getattr(self, only.option)}, which ignores it")
        for name in ("base_url", "writer_base_url"):
            url = getattr(self, name)
            if url is not None and not _is_http_url(url):
                raise OptionsError(f"{flag(name)} {url}: not an http(s) URL with a host, e.g. "
                                   "http://127.0.0.1:8000/v1")
        if self.agent == "openai" and not (self.base_url and self.model):
            raise OptionsError("--agent openai needs --base-url and --model")
        if self.writer == "openai" and not ((self.writer_base_url or self.base_url)
                                            and (self.writer_model or self.model)):
            raise OptionsError("--writer openai needs --writer-base-url and --writer-model (or --base-url and "
                               "--model)")

    def applies(self, name: str) -> bool:
        """Whether option ``name`` is read by this run: an :class:`Only` option where its
        agent or writer kind is in use (``--base-url`` and ``--model`` also by the OpenAI
        writer, whose endpoint defaults to them)."""
        only = _marker(type(self).model_fields[name], Only)
        if only is None or getattr(self, only.option) == only.value:
            return True
        return name in _WRITER_DEFAULTS and self.writer == "openai"

    def config(self) -> RunConfig:
        """The run's identity, as stored in ``config.json`` (after :meth:`check`): the
        result fields, each :class:`Only` field ``None`` where it does not apply,
        the writer's endpoint defaulting to the agent's, and the task file's hash."""
        self.check()
        values = {}
        for name, field in type(self).model_fields.items():
            if name in RunConfig.model_fields:
                only = _marker(field, Only)
                applies = only is None or getattr(self, only.option) == only.value
                values[name] = getattr(self, name) if applies else None
        if self.writer == "openai":
            values["writer_base_url"] = self.writer_base_url or self.base_url
            values["writer_model"] = self.writer_model or self.model
        path = self.tasks_path()
        values["tasks"] = str(path)
        values["tasks_sha256"] = hashlib.sha256(path.read_bytes()).hexdigest()
        return RunConfig(**values)


_WRITER_DEFAULTS = ("base_url", "model")
"""Agent options the OpenAI writer also reads (the defaults of its own)."""


def _is_http_url(url: str) -> bool:
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (raises ValueError on a port that is not a number)
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.hostname)


def _marker(field, kind):
    return next((m for m in field.metadata if isinstance(m, kind)), None)


OMIT_AT_DEFAULT = ("aa_runs", "noise_draw")
"""Fields added after run directories existed: left out of ``config.json`` at
their default (``None`` where not applicable), so a run that does not use
them writes the configuration an older version wrote, and resumes one."""


class _ConfigBase(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    def stored(self) -> dict:
        """What ``config.json`` holds: every field, but :data:`OMIT_AT_DEFAULT` at its default."""
        fields = type(self).model_fields
        return {k: v for k, v in self.model_dump().items()
                if not (k in OMIT_AT_DEFAULT and v == fields[k].default)}

    def identity(self) -> dict:
        """What must match to resume: everything but the task file's path (its hash counts)."""
        return self.model_dump(exclude={"tasks"})


def _config_fields() -> dict:
    fields: dict = {"tasks": (str, ...), "tasks_sha256": (str, ...)}
    for name, field in RunOptions.model_fields.items():
        if name == "tasks" or _marker(field, _Call):
            continue
        kind = field.annotation
        bounds = [m for m in field.metadata if not isinstance(m, Only)]
        if bounds:
            kind = Annotated[(kind, *bounds)]
        if _marker(field, Only) is not None:
            fields[name] = (Optional[kind], None)
        else:
            fields[name] = (kind, field.default)
    return fields


RunConfig = create_model("RunConfig", __base__=_ConfigBase, __module__=__name__, **_config_fields())
"""A run's identity: ``tasks`` (the path as given, for the record), ``tasks_sha256``,
then every :class:`RunOptions` field that is not :data:`CALL`, in order."""
