"""``ProbeEnv``: a :class:`~multiturn_envs.testing.GuessEnv` that misbehaves on command.

What serves or runs envs (the env server, a harness) must survive an env that never returns,
holds the GIL, crashes, segfaults or eats memory: this env does each on a word of the agent's,
so that a test can make it happen through the real wire. Every other action is a GuessEnv
action (``guess N``). Commands:

* ``crash``: ``_step`` raises ``RuntimeError`` (an env bug: the contract says it never raises);
* ``sleep S``: sleeps ``S`` seconds (a slow step that a signal can interrupt);
* ``hold S``: sleeps ``S`` seconds in a C call that keeps the GIL (a slow but legal step that
  freezes every other thread of its process meanwhile, as a long regex does);
* ``random``: answers with 8 random bytes from the OS (a step that is not deterministic:
  a replay of the episode gives another observation);
* ``regex N``: ``re.fullmatch(r"(a+)+b", "a" * N)``, catastrophic backtracking that holds the
  GIL in C code and runs for ~2**N steps (``regex 40``: for ever, as far as a test goes);
* ``segv``: reads address 0 (a segfault, as SQLite calling through an agent-chosen pointer);
* ``exit``: ``os._exit(7)``;
* ``hog MB``: allocates and touches ``MB`` MiB;
* ``big N``: answers with an observation of ``N`` characters;
* ``pid``: answers with the process id (which process runs the env).

``close_log``: a file to which every ``close()`` appends one line (``pid``), so that a test
in another process sees which envs were closed. Importing this module registers
``MTTest/Probe-v0``; a server serves it as ``multiturn_envs.testing.probe:MTTest/Probe-v0``.
:class:`BlockingProbeEnv` (``MTTest/BlockingProbe-v0``) is the same env declaring
``blocking_io``, so the async API steps it in a worker thread as it does DeepCoder and
Terminal (``sleep S``: a step that waits, as a container run does).
"""

from __future__ import annotations

import os
import re
import time
from typing import Any

import gymnasium as gym

from multiturn_envs.core import StepOutcome
from multiturn_envs.testing import GuessEnv

PROBE_ID = "MTTest/Probe-v0"
BLOCKING_PROBE_ID = "MTTest/BlockingProbe-v0"


class ProbeEnv(GuessEnv):
    """GuessEnv plus misbehaviour on command (see the module docstring).

    Args:
        max_turns: the turn budget.
        close_log: a file that gets one line per ``close()``.
    """

    def __init__(self, max_turns: int | None = 6, close_log: str | None = None, **kw: Any) -> None:
        super().__init__(max_turns=max_turns, **kw)
        self.close_log = close_log

    def _step(self, action: str) -> StepOutcome:
        word, _, arg = action.strip().partition(" ")
        if word == "crash":
            raise RuntimeError("boom (the probe was told to crash)")
        if word == "sleep":
            time.sleep(float(arg))
        elif word == "hold":
            import ctypes

            ctypes.PyDLL(None).usleep(int(float(arg) * 1e6))  # PyDLL: the GIL is kept
        elif word == "random":
            return StepOutcome(os.urandom(8).hex(), 0.0, False, False, 0.0)
        elif word == "regex":
            re.fullmatch(r"(a+)+b", "a" * int(arg))
        elif word == "segv":
            import ctypes

            ctypes.string_at(0)
        elif word == "exit":
            os._exit(7)
        elif word == "hog":
            block = bytearray(int(arg) << 20)
            block[:: 1 << 12] = b"x" * len(block[:: 1 << 12])
        elif word == "big":
            return StepOutcome("x" * int(arg), 0.0, False, False, 0.0)
        elif word == "pid":
            return StepOutcome(str(os.getpid()), 0.0, False, False, 0.0)
        else:
            return super()._step(action)
        return StepOutcome(f"{word} done", 0.0, False, False, 0.0)

    def _close(self) -> None:
        if self.close_log is not None:
            with open(self.close_log, "a", encoding="utf-8") as log:
                log.write(f"{os.getpid()}\n")


class BlockingProbeEnv(ProbeEnv):
    """:class:`ProbeEnv` whose steps count as waiting on I/O: ``areset``/``astep`` run them in a
    worker thread (what serialising async calls must hold for a real sandboxed env)."""

    blocking_io = True


def register_probe() -> None:
    """Register ``MTTest/Probe-v0`` and ``MTTest/BlockingProbe-v0`` (idempotent)."""
    if PROBE_ID not in gym.registry:
        gym.register(PROBE_ID, entry_point=f"{__name__}:ProbeEnv", max_episode_steps=None)
    if BLOCKING_PROBE_ID not in gym.registry:
        gym.register(
            BLOCKING_PROBE_ID, entry_point=f"{__name__}:BlockingProbeEnv", max_episode_steps=None
        )


register_probe()
