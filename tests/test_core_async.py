"""The async env API holds one call at a time per env (issue 29, :mod:`multiturn_envs.step_gate`).

Bounds checked: at most one step of an env runs at any moment (an instrumented ``_step``
counts overlaps), the turn budget is never exceeded, calls run in the order they were made, a
call cancelled while it waits never runs, a cancelled call's step that already runs in its
worker thread completes before the next call starts, and the trajectory equals the one a
sequential run of the steps that ran gives. Hypothesis drives cancellations at random points
on an inline env and a blocking one (``blocking_io``: steps in a worker thread, as DeepCoder's
and Terminal's); a real DeepCoder env on the Docker pool is checked the same way.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import gymnasium as gym
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from multiturn_envs.core import StepOutcome, aclose_env, astep_env, gate_of
from multiturn_envs.errors import EnvBusy, EpisodeOver
from multiturn_envs.testing.probe import BlockingProbeEnv, ProbeEnv

SECRET = "secret-11"


class Counting:
    """Mixin: counts the steps of this env running at once (the bound is 1)."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)  # type: ignore[call-arg]
        self.running = 0
        self.most = 0
        self.count_lock = threading.Lock()

    def _step(self, action: str) -> StepOutcome:
        with self.count_lock:
            self.running += 1
            self.most = max(self.most, self.running)
        try:
            return super()._step(action)  # type: ignore[misc, no-any-return]
        finally:
            with self.count_lock:
                self.running -= 1


class InlineEnv(Counting, ProbeEnv):
    pass


class BlockingEnv(Counting, BlockingProbeEnv):
    pass


def _actions(kinds: list[int]) -> list[str]:
    """Distinct actions: a guess (each number once), an unreadable reply, or a waiting step."""
    guesses = iter([3, 12, 5, 9, 1, 14, 7, 0, 15, 2])
    out = []
    for i, kind in enumerate(kinds):
        if kind == 0:
            out.append(f"guess {next(guesses)}")
        elif kind == 1:
            out.append(f"noop {i}")
        else:
            out.append(f"sleep {0.005 * (kind - 1) + 0.0001 * i:.4f}")
    return out


async def _drive(
    env: Any, actions: list[str], cancels: list[float | None], overlap: list[bool]
) -> list[Any]:
    """Each action as a task (several in flight when ``overlap``), some cancelled after a
    delay; every outcome (a step's result or its exception), once the env is free again."""
    loop = asyncio.get_running_loop()
    tasks = []
    for action, cancel, together in zip(actions, cancels, overlap):
        task = asyncio.ensure_future(astep_env(env, action))
        if cancel is not None:
            loop.call_later(cancel, task.cancel)
        tasks.append(task)
        if not together:
            await asyncio.sleep(0.002)
    outcomes = await asyncio.gather(*tasks, return_exceptions=True)
    gate = gate_of(env)
    await gate.acquire()  # the next call: after every step still running (a cancelled one's)
    gate.release()
    assert not gate.held
    return list(outcomes)


def _check(env: Any, actions: list[str], outcomes: list[Any], budget: int, blocking: bool) -> None:
    history = env.messages()
    taken = [m["content"] for m in history[1::2]]
    seen = [m["content"] for m in history[2::2]]
    assert env.most == 1, "two steps of one env ran at once"
    assert len(taken) <= budget and env.turn == len(taken)
    where = [actions.index(a) for a in taken]
    assert where == sorted(where), "the steps ran out of the order they were made"
    over = False
    for action, outcome in zip(actions, outcomes):
        if isinstance(outcome, tuple):  # returned: its turn is in the history, as answered
            assert not over and action in taken
            assert outcome[0] == seen[taken.index(action)]
        elif isinstance(outcome, EpisodeOver):
            assert env.done and action not in taken
            over = True
        else:
            assert isinstance(outcome, asyncio.CancelledError), outcome
            if not blocking:  # an inline step is cancelled only while it waits: it never ran
                assert action not in taken
    # the same steps one after another give the same episode
    twin = ProbeEnv(max_turns=budget)
    twin.reset(seed=0, options={"task_id": SECRET})
    for action in taken:
        twin.step(action)
    assert twin.messages() == history


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    blocking=st.booleans(),
    budget=st.integers(1, 5),
    kinds=st.lists(st.integers(0, 4), min_size=1, max_size=8),
    data=st.data(),
)
def test_cancelled_and_concurrent_calls_give_a_sequential_episode_within_the_budget(
    blocking: bool, budget: int, kinds: list[int], data: st.DataObject
) -> None:
    """Bound: one step at a time per env, the budget held, any calls gathered or cancelled at
    any point (while queued, while running in the worker thread, after returning)."""
    n = len(kinds)
    cancels = data.draw(
        st.lists(st.none() | st.floats(0.0, 0.03), min_size=n, max_size=n), label="cancels"
    )
    overlap = data.draw(st.lists(st.booleans(), min_size=n, max_size=n), label="overlap")
    actions = _actions(kinds)
    env = (BlockingEnv if blocking else InlineEnv)(max_turns=budget)
    env.reset(seed=0, options={"task_id": SECRET})
    outcomes = asyncio.run(_drive(env, actions, cancels, overlap))
    _check(env, actions, outcomes, budget, blocking)


def test_a_cancelled_blocking_step_completes_before_the_next_and_the_budget_holds() -> None:
    """The issue's case: ``wait_for`` cancels a step running in its thread; the next ``astep``
    waits for it and finds the 1-turn budget spent (before: it ran beside it and the episode
    reached turn 2). ``gather`` of three steps runs them one after another."""

    async def main() -> None:
        env = BlockingEnv(max_turns=1)
        await env.areset(seed=0, options={"task_id": SECRET})
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(env.astep("sleep 0.3"), 0.05)
        with pytest.raises(EpisodeOver):
            await env.astep("guess 3")
        assert env.turn == 1 and env.messages()[-1]["content"] == "sleep done"
        env = BlockingEnv(max_turns=5)
        await env.areset(seed=0, options={"task_id": SECRET})
        start = time.monotonic()
        await asyncio.gather(*(env.astep(f"sleep 0.{i}5") for i in range(1, 4)))
        assert time.monotonic() - start >= 0.45 and env.most == 1
        assert [m["content"] for m in env.messages()[1::2]] == [
            "sleep 0.15",
            "sleep 0.25",
            "sleep 0.35",
        ]

    asyncio.run(main())


def test_a_sync_call_while_an_async_one_holds_the_env_is_refused_and_close_waits() -> None:
    """``reset``/``step`` while an ``astep`` runs in its thread (or waits its turn) raise
    :class:`EnvBusy` instead of running beside it; ``close`` waits for the running step;
    ``aclose`` comes after every queued call."""

    async def main() -> None:
        env = BlockingEnv(max_turns=5)
        await env.areset(seed=0, options={"task_id": SECRET})
        running = asyncio.ensure_future(env.astep("sleep 0.3"))
        queued = asyncio.ensure_future(env.astep("guess 3"))
        await asyncio.sleep(0.05)
        with pytest.raises(EnvBusy, match="astep"):
            env.step("guess 4")
        with pytest.raises(EnvBusy):
            env.reset(seed=0)
        running.cancel()
        await asyncio.sleep(0)
        closed = asyncio.ensure_future(aclose_env(env))
        await asyncio.gather(running, return_exceptions=True)
        await queued
        await closed
        assert [m["content"] for m in env.messages()[1::2]] == ["sleep 0.3", "guess 3"]
        assert env._closed

        env = BlockingEnv(max_turns=5)
        env.reset(seed=0, options={"task_id": SECRET})
        step = asyncio.ensure_future(env.astep("sleep 0.3"))
        await asyncio.sleep(0.05)
        step.cancel()
        start = time.monotonic()
        await asyncio.to_thread(env.close)  # from another thread: waits for the step
        assert time.monotonic() - start > 0.15 and env.turn == 1

    asyncio.run(main())


def test_an_env_used_from_one_event_loop_then_another_keeps_one_queue() -> None:
    """The gate is not bound to a loop: ``asyncio.run`` after ``asyncio.run`` on one env (a
    cancelled step left running by the first) serialises as within one loop."""
    env = BlockingEnv(max_turns=3)
    env.reset(seed=0, options={"task_id": SECRET})

    async def first() -> None:
        task = asyncio.ensure_future(env.astep("sleep 0.2"))
        await asyncio.sleep(0.05)
        task.cancel()

    asyncio.run(first())  # asyncio.run waits for its executor: the step has completed
    asyncio.run(env.astep("guess 3"))
    assert env.turn == 2 and env.most == 1 and not gate_of(env).held


def test_wrapped_envs_share_their_base_envs_gate() -> None:
    """Two wrapper stacks over one env queue behind each other (the gate is the base env's)."""
    env = BlockingEnv(max_turns=4)
    one, two = gym.Wrapper(env), gym.Wrapper(gym.Wrapper(env))
    env.reset(seed=0, options={"task_id": SECRET})
    assert gate_of(one) is gate_of(two) is gate_of(env)

    async def main() -> None:
        await asyncio.gather(astep_env(one, "sleep 0.1"), astep_env(two, "sleep 0.1"))

    asyncio.run(main())
    assert env.most == 1 and env.turn == 2


# ------------------------------------------------------------------ a real DeepCoder env
FAIL = "```python\nimport time\ntime.sleep(0.3)\nprint(0)\n```"


@pytest.mark.docker
@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cancel=st.floats(0.0, 0.4), budget=st.integers(1, 2), together=st.booleans())
def test_deepcoder_on_the_docker_pool_holds_one_step_and_its_budget(
    deepcoder_docker: Any, cancel: float, budget: int, together: bool
) -> None:
    """Bound: a real DeepCoder env (Docker sandbox, steps in a worker thread): a submission
    cancelled at any point, then two more gathered or one after another, never run two at once
    and never pass the budget; the history equals a sequential run's."""
    from multiturn_envs.envs.deepcoder.env import DeepCoderEnv

    env = DeepCoderEnv(backend=deepcoder_docker, max_turns=budget)
    task = env.task_ids()[0]

    async def main() -> list[Any]:
        await env.areset(seed=0, options={"task_id": task})
        first = asyncio.ensure_future(env.astep(FAIL))
        asyncio.get_running_loop().call_later(cancel, first.cancel)
        later = [env.astep("```python\nprint(1)\n```"), env.astep("```python\nprint(2)\n```")]
        if together:
            outcomes = list(await asyncio.gather(first, *later, return_exceptions=True))
        else:
            outcomes = [
                (await asyncio.gather(c, return_exceptions=True))[0] for c in (first, *later)
            ]
        await aclose_env(env)
        return outcomes

    try:
        outcomes = asyncio.run(main())
        taken = [m["content"] for m in env.messages()[1::2]]
        seen = [m["content"] for m in env.messages()[2::2]]
        assert len(taken) == env.turn <= budget
        for outcome in outcomes:
            if isinstance(outcome, tuple):
                assert outcome[0] in seen
            else:
                assert isinstance(outcome, EpisodeOver | asyncio.CancelledError), outcome
        twin = DeepCoderEnv(backend=deepcoder_docker, max_turns=budget)
        twin.reset(seed=0, options={"task_id": task})
        for action in taken:
            twin.step(action)
        assert [m["content"] for m in twin.messages()] == [m["content"] for m in env.messages()]
        twin.close()
    finally:
        env.close()


@pytest.fixture(scope="module")
def deepcoder_docker() -> str:
    from multiturn_envs.testing import require

    try:
        from multiturn_envs.sandbox.engine import docker_unavailable
    except ImportError as exc:
        problem: str | None = f"the docker SDK ({exc})"
    else:
        problem = docker_unavailable()
    require(problem is None, f"a docker engine with the sandbox image ({problem})")
    return "docker"
