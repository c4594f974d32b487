"""A conformance check any MT/* env (ours or a user's) can run in its own tests.

In the spirit of PettingZoo's ``api_test``: one call exercises the whole env contract of
``docs/env-contract.md``::

    from multiturn_envs.testing import check_text_env

    def test_my_env_conforms():
        check_text_env(lambda: MyEnv(max_turns=5))

It raises ``AssertionError`` naming the broken rule. The module also holds :class:`GuessEnv`, the
smallest complete ``TextEnv`` (a template for new envs and the toy of our own tests), and
:func:`require`, the CI rule for tests that need a real part. What the check covers:

1. Gymnasium's own ``check_env`` on the unwrapped env.
2. ``reset(seed)`` fixes the task and the first observation; the same seed and actions give the
   same trajectory (observations, rewards, flags, infos).
3. Every ``info`` has the contract's keys with the right types; ``step_score`` is in [0, 1];
   ``terminated``/``truncated`` are Python bools.
4. The oracle hooks: ``expert_action`` and ``error_action`` return strings, ``score_action`` is in
   [0, 1], never changes the state, and scores the expert at least as high as the error;
   an error action never ends the episode.
5. ``get_state``/``set_state`` round trip, also onto a freshly made env.
6. Hostile actions (empty, huge, binary-looking, Unicode, markup) never raise from ``step``.
7. The budget truncates at exactly ``max_turns``; stepping after the end raises a clear error; a
   budget named in ``reset`` options holds for that episode only.
8. ``messages()`` alternates user/assistant and ends with the last observation; ``close()`` twice.
"""

from __future__ import annotations

import copy
import math
import os
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.utils.env_checker import check_env

from multiturn_envs.core import BudgetMode, StepOutcome, TextEnv

HOSTILE_ACTIONS: tuple[str, ...] = (
    "",
    " ",
    "\n\n\n",
    "\x00\x01\x02 binary \xff",
    "Ω≈ç√∫ 한국어 🤖 \u202e reversed",
    "```\n```",
    "<answer></answer>",
    "{'__class__': '__subclasses__'}",
    "__import__('os').system('echo pwned')",
    "x" * 200_000,
    "\ud800 lone surrogate",
)

REQUIRED_INFO_KEYS: dict[str, tuple[type, ...]] = {
    "task_id": (str,),
    "turn": (int,),
    "turns_left": (int, type(None)),
    "max_turns": (int, type(None)),
    "budget_mode": (str,),
    "success": (bool,),
    "parse_error": (bool,),
    "prefix_turns": (int,),
    "state_key": (str,),
}


def _unwrapped(env: gym.Env[Any, Any]) -> TextEnv:
    base = env.unwrapped
    assert isinstance(base, TextEnv), f"{type(base).__name__} is not a multiturn_envs.TextEnv"
    return base


def _check_info(info: dict[str, Any], *, after_step: bool) -> None:
    for key, types in REQUIRED_INFO_KEYS.items():
        assert key in info, f"info lacks {key!r}"
        assert isinstance(info[key], types), f"info[{key!r}] = {info[key]!r} is not {types}"
    assert "step_score" in info, "info lacks 'step_score'"
    if after_step:
        score = info["step_score"]
        assert isinstance(score, float) and not math.isnan(score), f"step_score {score!r}"
        assert 0.0 <= score <= 1.0, f"step_score {score} is outside [0, 1]"
        assert "truncation_reason" in info, "step info lacks 'truncation_reason'"


def _rollout(
    env: TextEnv, seed: int, task_id: str, actions: Sequence[str]
) -> list[tuple[Any, ...]]:
    obs, info = env.reset(seed=seed, options={"task_id": task_id})
    out: list[tuple[Any, ...]] = [(obs, info)]
    for action in actions:
        if env.done:
            break
        out.append(env.step(action))
    return out


def _same(a: Any, b: Any) -> bool:
    return bool(gym.utils.env_checker.data_equivalence(a, b))


def check_text_env(
    make_env: Callable[[], gym.Env[str, str]],
    *,
    task_ids: Sequence[str] | None = None,
    seeds: Sequence[int] = (0, 1),
    n_steps: int = 4,
    hostile: bool = True,
    run_gymnasium_check: bool = True,
) -> None:
    """Assert that the env built by ``make_env`` honours the MT/* env contract.

    Args:
        make_env: builds a fresh env (wrapped or not); called a few times.
        task_ids: tasks to exercise (default: the first two of ``task_ids()``).
        seeds: reset seeds for the determinism checks.
        n_steps: actions per probe trajectory (keep small for envs with costly steps).
        hostile: also step the hostile actions of :data:`HOSTILE_ACTIONS`.
        run_gymnasium_check: run ``gymnasium.utils.env_checker.check_env`` first.
    """
    env = make_env()
    base = _unwrapped(env)
    try:
        if run_gymnasium_check:
            try:
                check_env(base, skip_render_check=True, skip_close_check=True)
            except AssertionError:
                raise
            except Exception as exc:  # e.g. step() raised on a sampled garbage action
                raise AssertionError(f"gymnasium check_env: step or reset raised {exc!r}") from exc
        ids = list(task_ids) if task_ids is not None else list(base.task_ids())[:2]
        assert ids, "the env lists no task ids"
        rng = np.random.default_rng(1234)
        for task_id in ids:
            for seed in seeds:
                _check_determinism_and_info(make_env, base, task_id, seed, n_steps, rng)
            _check_oracle(base, task_id, seeds[0], rng)
            _check_snapshot(make_env, base, task_id, seeds[0], n_steps, rng)
            _check_budget(base, task_id, seeds[0], rng)
            if hostile:
                _check_hostile(base, task_id, seeds[0])
            _check_tools(base, task_id, seeds[0], hostile)
        _check_messages(base, ids[0], seeds[0], rng)
    finally:
        env.close()
        env.close()


def _probe_actions(env: TextEnv, rng: np.random.Generator, n: int) -> list[str]:
    """Random well-formed actions with one piece of random garbage text in the middle."""
    actions = [env.random_action(rng) for _ in range(n)]
    if n >= 2:
        actions[n // 2] = env.action_space.sample()
    return actions


def _check_determinism_and_info(
    make_env: Callable[[], gym.Env[str, str]],
    base: TextEnv,
    task_id: str,
    seed: int,
    n_steps: int,
    rng: np.random.Generator,
) -> None:
    base.reset(seed=seed, options={"task_id": task_id})
    actions = _probe_actions(base, rng, n_steps)
    first = _rollout(base, seed, task_id, actions)
    assert first[0][1]["task_id"] == task_id, "reset(options={'task_id'}) did not load that task"
    _check_info(first[0][1], after_step=False)
    for step in first[1:]:
        obs, reward, terminated, truncated, info = step
        assert isinstance(obs, str), f"observation is {type(obs).__name__}, not str"
        assert isinstance(reward, float), f"reward is {type(reward).__name__}, not float"
        assert type(terminated) is bool and type(truncated) is bool, "flags must be Python bools"
        _check_info(info, after_step=True)
    second = _rollout(base, seed, task_id, actions)
    assert _same(first, second), f"same seed {seed} and actions gave different trajectories"
    other = _unwrapped(make_env())
    try:
        third = _rollout(other, seed, task_id, actions)
    finally:
        other.close()
    assert _same(first, third), "a fresh env with the same seed and actions diverged"


def _check_oracle(base: TextEnv, task_id: str, seed: int, rng: np.random.Generator) -> None:
    base.reset(seed=seed, options={"task_id": task_id})
    before = base.get_state()
    expert = base.expert_action()
    error = base.error_action(np.random.default_rng(int(rng.integers(2**31))))
    assert isinstance(expert, str) and isinstance(error, str), "oracle actions must be str"
    s_expert = base.score_action(expert)
    s_error = base.score_action(error)
    for s in (s_expert, s_error):
        assert isinstance(s, float) and 0.0 <= s <= 1.0, f"score_action gave {s!r}"
    assert s_expert >= s_error - 1e-9, f"expert scores {s_expert} < error {s_error}"
    assert _same(before, base.get_state()), "score_action changed the env's state"
    _, _, terminated, _, info = base.step(error)
    assert not terminated, f"error_action {error!r:.80} ended the episode"
    assert abs(info["step_score"] - s_error) < 1e-9, "step_score differs from score_action"


def _check_snapshot(
    make_env: Callable[[], gym.Env[str, str]],
    base: TextEnv,
    task_id: str,
    seed: int,
    n_steps: int,
    rng: np.random.Generator,
) -> None:
    base.reset(seed=seed, options={"task_id": task_id})
    _, _, terminated, truncated, _ = base.step(base.random_action(rng))
    if terminated or truncated:
        return
    snapshot = copy.deepcopy(base.get_state())
    actions = _probe_actions(base, rng, n_steps)
    continuation = []
    for action in actions:
        if base.done:
            break
        continuation.append(base.step(action))
    base.set_state(snapshot)
    replay = [base.step(a) for a in actions[: len(continuation)]]
    assert _same(continuation, replay), "set_state(get_state()) did not restore the exact state"
    other = _unwrapped(make_env())
    try:
        other.reset(seed=seed + 1, options={"task_id": task_id})
        other.set_state(snapshot)
        elsewhere = [other.step(a) for a in actions[: len(continuation)]]
    finally:
        other.close()
    assert _same(continuation, elsewhere), "a snapshot restored onto a fresh env diverged"


def _check_budget(base: TextEnv, task_id: str, seed: int, rng: np.random.Generator) -> None:
    default = base.default_budget
    # the reset names this episode's budget; the env's default stays as it was
    base.reset(seed=seed, options={"task_id": task_id, "max_turns": 2, "budget_mode": "hidden"})
    # Error actions never end the episode, so the budget is what stops it.
    error_rng = np.random.default_rng(int(rng.integers(2**31)))
    steps = 0
    truncated = False
    while not base.done:
        _, _, _, truncated, info = base.step(base.error_action(error_rng))
        steps += 1
        assert info["turns_left"] == 2 - steps, "turns_left does not count down"
    assert steps == 2 and truncated, "a budget of 2 did not truncate after exactly 2 turns"
    try:
        base.step("anything")
    except gym.error.ResetNeeded:
        pass
    else:
        raise AssertionError("stepping after the episode ended did not raise")
    _, info = base.reset(seed=seed, options={"task_id": task_id})
    assert (info["max_turns"], info["budget_mode"]) == default, (
        "a budget named in reset options outlived its episode"
    )


def _check_hostile(base: TextEnv, task_id: str, seed: int) -> None:
    for action in HOSTILE_ACTIONS:
        base.reset(seed=seed, options={"task_id": task_id})
        try:
            obs, _, _, _, info = base.step(action)
        except Exception as exc:  # the contract: bad text is a legal action
            raise AssertionError(f"step({action!r:.40}) raised {exc!r}") from exc
        assert isinstance(obs, str) and obs, f"step({action!r:.40}) gave an empty observation"
        _check_info(info, after_step=True)


HOSTILE_TOOL_CALLS: tuple[str, ...] = (
    "<tool_call>" + "[" * 100_000 + "</tool_call>",
    '<tool_call>{"name": "x", "arguments": {"a": "' + "A" * (1 << 20) + '"}}</tool_call>',
    "<tool_call>{not json",
    '<tool_call>{"name": "no_such_tool", "arguments": {}}</tool_call>',
    '<tool_call>{"name": 3}</tool_call><tool_call>{}</tool_call>' * 50,
)
"""Tool-call actions a degenerate or hostile policy emits; each must be a turn, never a crash."""


def _check_tools(base: TextEnv, task_id: str, seed: int, hostile: bool) -> None:
    """Declared tools are valid OpenAI functions, and bad tool calls are turns with a message."""
    import json

    from multiturn_envs.tools import Tool

    base.reset(seed=seed, options={"task_id": task_id})
    tools = list(base.tools())
    if not tools:
        return
    names = [t.name for t in tools]
    assert len(set(names)) == len(names), f"tool names repeat: {names}"
    for tool in tools:
        assert isinstance(tool, Tool), f"tools() returned {type(tool).__name__}, not a Tool"
        json.dumps(tool.openai())  # JSON-able: servers and chat templates take it as is
        assert tool.description, f"tool {tool.name!r} has no description"
    if not hostile:
        return
    for action in HOSTILE_TOOL_CALLS:
        base.reset(seed=seed, options={"task_id": task_id})
        try:
            obs, _, _, _, info = base.step(action)
        except Exception as exc:  # the contract: a bad call is a legal action
            raise AssertionError(f"step({action!r:.40}) raised {exc!r}") from exc
        assert isinstance(obs, str) and obs, f"step({action!r:.40}) gave an empty observation"
        assert info["parse_error"], f"step({action!r:.40}) was not reported as a parse error"
        assert len(obs) < 20_000, "the error observation echoes the hostile call"
        _check_info(info, after_step=True)


def _check_messages(base: TextEnv, task_id: str, seed: int, rng: np.random.Generator) -> None:
    obs, _ = base.reset(seed=seed, options={"task_id": task_id})
    assert base.messages() == [{"role": "user", "content": obs}], "messages() after reset"
    action = base.random_action(rng)
    obs, *_ = base.step(action)
    msgs = base.messages()
    roles = [m["role"] for m in msgs]
    assert roles == ["user", "assistant", "user"], f"messages() roles {roles}"
    assert msgs[1]["content"] == action and msgs[-1]["content"] == obs, "messages() content"


def require(condition: bool, what: str) -> None:
    """In a test: skip when a real part is missing, except under CI (``CI=true``): fail there.

    Tests that need Docker, a dataset package or a model may skip on a user's machine that lacks
    it, but a CI run that silently skipped them would prove nothing.
    """
    if condition:
        return
    import pytest  # only test code calls this

    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true but {what} is missing", pytrace=False)
    pytest.skip(f"{what} is missing")


class GuessEnv(TextEnv):
    """Guess a secret number in [0, 15]; the env answers 'higher' or 'lower'.

    A deterministic toy with a finite action set and an exact oracle (binary search), used to
    test the base class, the wrappers and the conformance check without any real env.
    """

    def __init__(self, max_turns: int | None = 6, budget_mode: BudgetMode = "hidden") -> None:
        super().__init__(max_turns=max_turns, budget_mode=budget_mode)
        self._secret = 0
        self._lo, self._hi = 0, 15

    def task_ids(self) -> Sequence[str]:
        return [f"secret-{i}" for i in range(16)]

    def _load_task(self, task_id: str, options: dict[str, Any]) -> str:
        self._secret = int(task_id.split("-")[1])
        self._lo, self._hi = 0, 15
        return "Guess my number in [0, 15]. Reply 'guess N'."

    def valid_actions(self) -> Sequence[str]:
        return [f"guess {i}" for i in range(16)]

    def _parse(self, action: str) -> int | None:
        parts = action.strip().split()
        if len(parts) == 2 and parts[0] == "guess" and parts[1].isdigit():
            value = int(parts[1])
            return value if 0 <= value <= 15 else None
        return None

    def _score(self, guess: int | None) -> float:
        """1 for the secret; else the worst-case share of candidates the guess eliminates."""
        if guess is None or not self._lo <= guess <= self._hi:
            return 0.0
        if guess == self._secret:
            return 1.0
        width = self._hi - self._lo + 1
        return 1.0 - max(guess - self._lo, self._hi - guess) / width

    def _step(self, action: str) -> StepOutcome:
        guess = self._parse(action)
        score = self._score(guess)
        if guess is None:
            return StepOutcome(
                "I need 'guess N' with 0 <= N <= 15.",
                0.0,
                False,
                False,
                score,
                parse_error="unparseable",
            )
        if guess == self._secret:
            return StepOutcome("Correct!", 1.0, True, True, score)
        if guess < self._secret:
            self._lo = max(self._lo, guess + 1)
            return StepOutcome(f"{guess} is too low.", 0.0, False, False, score)
        self._hi = min(self._hi, guess - 1)
        return StepOutcome(f"{guess} is too high.", 0.0, False, False, score)

    def _get_state(self) -> Any:
        return {"secret": self._secret, "lo": self._lo, "hi": self._hi}

    def _set_state(self, state: Any) -> None:
        self._secret, self._lo, self._hi = state["secret"], state["lo"], state["hi"]

    def expert_action(self) -> str:
        return f"guess {(self._lo + self._hi) // 2}"

    def error_action(self, rng: np.random.Generator) -> str:
        wrong = [i for i in range(16) if i != self._secret]
        return f"guess {wrong[int(rng.integers(len(wrong)))]}"

    def state_key(self) -> str:
        return f"{self._secret}:{self._lo}-{self._hi}"
