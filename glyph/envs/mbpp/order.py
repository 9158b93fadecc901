"""The order in which RL draws the ``rl`` split's tasks, as a taskset switch
(``GlyphTasksetConfig.order``).

PRIME-RL at glyph's pin (559b447) draws a finite taskset's tasks by cycling
them in the order the taskset lists them (``curriculum/samplers/standard.py``,
``StandardSampler``: ``itertools.cycle``); an infinite taskset
(``Taskset.INFINITE``) it reads as a stream, one task a group
(``orchestrator/envs.py``, ``Env.start``; ``train_source.py``). The study ran
PRIME-RL at ``d334ea5``, whose ``TrainSource`` (``orchestrator/train_source.py``
there) drew differently: one ``random.Random(42)`` shuffles the task indexes
once, then for every task it hands out picks an environment with
``rng.choices`` (one env: a single ``random()`` call, whose result is unused
but advances the generator) and takes the next index, reshuffling the indexes
with the same generator when they run out. Its 100 steps of 4 groups draw 400
tasks from 212: one whole shuffle, then 188 of a second.

* ``listed``: the split in its listed order, cycled by the pin's sampler
  (glyph's order until it offered this switch).
* ``study``: the study's draw, reproduced at the pin: the taskset is endless
  and yields the study's sequence, so the pin's sampler streams it as is.
  Only the ``rl`` split has it (an eval reads a split once, in its listed
  order, as the study's did); a resumed run continues it (the pin's sampler
  skips as many tasks as its checkpoint counted).

The sequence depends only on the split's length and the seed, 42 in every
study run (``d334ea5``'s orchestrator: ``TrainSource(..., seed=42)``;
``inference.vllm.seed`` is the run seed), and on CPython's Mersenne Twister
and ``shuffle``, unchanged across the versions either stack runs.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Literal

Order = Literal["listed", "study"]
STUDY_SEED = 42
"""``d334ea5``'s ``TrainSource`` seed (its orchestrator passes 42 whatever the run's seed)."""


def study_draws(n: int, seed: int = STUDY_SEED) -> Iterator[int]:
    """The indexes (into the split as listed) that the study's ``TrainSource``
    hands out, forever: ``n`` tasks, one environment."""
    if n < 1:
        raise ValueError("the study's draw needs at least one task")
    rng = random.Random(seed)
    indexes = list(range(n))
    rng.shuffle(indexes)
    position = 0
    while True:
        rng.random()  # the env pick: rng.choices over one env takes one random() and changes nothing else
        if position == n:
            rng.shuffle(indexes)
            position = 0
        yield indexes[position]
        position += 1


ENDLESS = {"study": study_draws}
"""The orders that make the ``rl`` split an endless taskset, and the draw each yields."""


def endless(tasks: list, order: Order) -> Iterator:
    """``tasks`` (the split as listed) in the draw ``order`` names, for an endless taskset."""
    draws = ENDLESS.get(order)
    if draws is None:
        raise ValueError(f"order {order!r} lists the split once; only {', '.join(ENDLESS)} is endless")
    for i in draws(len(tasks)):
        yield tasks[i]


def taskset_class(base: type, order: Order, split: str) -> type:
    """The taskset class for ``order`` on ``split``: ``base`` itself, or its
    endless subclass (``INFINITE``: the pin reads a taskset's class, not the
    instance, to decide whether to stream it) for the study's draw on ``rl``."""
    if order not in ENDLESS or split != "rl":
        return base
    return _endless_subclass(base)


_SUBCLASSES: dict[type, type] = {}


def _endless_subclass(base: type) -> type:
    if base not in _SUBCLASSES:
        def load(self):
            return endless(list(base.load(self)), self.config.order)

        _SUBCLASSES[base] = type(f"{base.__name__}StudyOrder", (base,), {
            "INFINITE": True, "load": load, "__module__": base.__module__,
            "__doc__": f"{base.__name__} on the rl split, endless, in the study's draw (``order``)",
        })
    return _SUBCLASSES[base]
