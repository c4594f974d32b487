"""The fork server's warm-up (multiturn_envs/server/forkserver_warmup.py): what it fills, when
it runs, and that a failing one leaves the fork server alive (cold)."""

from __future__ import annotations

import functools
import subprocess
import sys
import threading
from collections import Counter
from typing import Any, ClassVar

import gymnasium as gym

from multiturn_envs.envs.frozenlake.env import build_task, clear_task_cache
from multiturn_envs.server.forkserver_warmup import WARM_UP_VAR, encode_factory, warm_up
from multiturn_envs.server.worker import first_reset, make_registered
from multiturn_envs.wrappers.turn_budget import text_env_of

FROZENLAKE = functools.partial(make_registered, "MT/FrozenLake-v0", {})
FREEZE_COUNT = (
    "import gc, multiturn_envs.server.forkserver_warmup as w; print(gc.get_freeze_count())"
)


def _in_a_fresh_python(code: str, env: dict[str, str] | None = None) -> str:
    import os

    result = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout.strip()


def test_warm_up_fills_frozenlakes_shared_task_cache_for_each_task() -> None:
    clear_task_cache()
    tasks = len(text_env_of(FROZENLAKE()).task_ids())
    warmed = warm_up(FROZENLAKE, budget_s=60.0)
    assert warmed == tasks  # every map, within a generous budget
    assert build_task.cache_info().currsize >= tasks


class _Counting(gym.Wrapper[str, str, str, str]):
    """Counts the calls the warm-up makes."""

    calls: ClassVar[Counter[str]] = Counter()

    def reset(self, **kwargs: Any) -> Any:
        self.calls["reset"] += 1
        return super().reset(**kwargs)

    def step(self, action: str) -> Any:
        self.calls["step"] += 1
        return super().step(action)


def test_warm_up_only_resets_no_action_runs_in_the_fork_server() -> None:
    _Counting.calls.clear()
    warmed = warm_up(lambda: _Counting(FROZENLAKE()), budget_s=60.0)
    assert _Counting.calls == Counter(reset=warmed)


def test_warm_up_stops_at_its_budget() -> None:
    assert warm_up(FROZENLAKE, budget_s=0.0) == 1  # the first task, then the deadline


def test_importing_the_module_outside_a_server_start_freezes_nothing() -> None:
    assert _in_a_fresh_python(FREEZE_COUNT) == "0"


def test_a_failing_warm_up_still_freezes_and_never_raises() -> None:
    broken = encode_factory(functools.partial(make_registered, "MT/NoSuchEnv-v0", {}))
    for value in ("not base64 !", broken):
        assert int(_in_a_fresh_python(FREEZE_COUNT, {WARM_UP_VAR: value})) > 0


def test_the_warm_up_var_is_removed_before_any_worker_can_see_it() -> None:
    code = (
        "import os, multiturn_envs.server.forkserver_warmup as w; "
        "print(os.environ.get(w.WARM_UP_VAR, 'gone'))"
    )
    assert _in_a_fresh_python(code, {WARM_UP_VAR: encode_factory(FROZENLAKE)}) == "gone"


class _LeavesAThread:
    """A factory whose env starts a thread that outlives ``close`` (as a sandbox pool's may)."""

    def __init__(self) -> None:
        self.stop = threading.Event()

    def __call__(self) -> gym.Env[Any, Any]:
        threading.Thread(target=self.stop.wait, daemon=True).start()
        return FROZENLAKE()


def test_first_reset_finds_an_env_that_leaves_a_thread_behind_unwarmable() -> None:
    assert first_reset(FROZENLAKE).warmable
    leaves = _LeavesAThread()
    try:
        assert not first_reset(leaves).warmable  # serve() then asks for no warm-up
    finally:
        leaves.stop.set()


def test_first_reset_finds_a_sandboxed_env_unwarmable() -> None:
    # DeepCoder's steps wait on a sandbox (blocking_io): the fork server must not run them
    deepcoder = functools.partial(make_registered, "MT/DeepCoder-v0", {"backend": "local"})
    assert not first_reset(deepcoder).warmable
