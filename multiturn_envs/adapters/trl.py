"""TRL adapter: any MT/* env as an ``environment_factory`` environment of TRL's ``GRPOTrainer``.

TRL's multi-turn interface (trl 1.16, ``GRPOTrainer(environment_factory=...)``) works like this:
the trainer builds one environment instance per rollout (pooled and reused), calls
``reset(**row)`` with every column of the dataset row, appends the returned string to the row's
last user message, and exposes every public method of the environment's class as a *tool* the
model calls in its chat template's tool-call syntax. Each tool result goes back to the model as a
``tool`` message and generation continues, until the model answers without a tool call or
``max_tool_calling_iterations`` is reached. ``get_reward()`` is called once per finished rollout
and is the environment's reward (weight 1, beside any ``reward_funcs``).

:class:`TRLEnvironment` maps that onto the env contract:

* ``reset(**row)`` reads ``task_id``, ``seed``, ``max_turns`` and ``budget_mode`` from the row
  (other columns, ``prompt`` included, are ignored) and returns the env's first observation. The
  ``G`` rollouts of one GRPO group share a row, hence the same task, start and budget; rows with a
  ``max_turns`` column give a per-row budget, and an env wrapped in
  :class:`~multiturn_envs.wrappers.BudgetMix` draws the budget from the row's seed: TRL's
  interface can express the study's per-reset budgets.
* The one tool, ``act(action)``, is one env turn: its result is the env's next observation. A
  tool call is a turn whatever its text; a reply without a tool call is not an action and ends
  the rollout (TRL's rule). After the episode ends (success, a terminal state or the turn budget)
  ``act`` steps nothing and says so, so the env's budget, not TRL's iteration cap, is the budget.
* ``get_reward()`` is the episode's return (the sum of env rewards: wrap the env in
  :class:`~multiturn_envs.wrappers.ProcessReward` for the oracle's step scores), with
  ``reward="success"`` 1.0 for a solved task, or with ``reward="process"`` the return plus
  ``step_weight`` x :attr:`TRLEnvironment.process_score`: the turns' step credits (the oracle's
  step score, but 0 for an unparsable reply and for a turn from a state already lost, see
  :func:`step_credit`) summed and divided by the turns a solved episode took, or by the budget
  for every other ending. Each rule closes a loophole: a mean over turns taken paid one good
  move and then silence (measured: GRPO found it), and over a failed episode's turns it would
  pay walking into a hole early; empty replies and moves from a lost state score 1.0 under the
  oracle (nothing left to lose), so a rollout that wasted its budget earned the full process
  bonus (measured); and a per-budget sum for solved episodes paid spending the budget's slack.
* The episode as chat: :attr:`TRLEnvironment.messages` (the env's own ``messages()``) and
  :func:`grpo_dataset` builds rows whose prompt carries the env's system prompt.

Only ``reset``, ``get_reward`` and ``act`` are public *methods*: TRL turns any other public
method into a tool, so everything else here is a property or private.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any, Literal

import gymnasium as gym

import multiturn_envs  # noqa: F401  (registers the MT/* ids)
from multiturn_envs.core import TextEnv
from multiturn_envs.wrappers.turn_budget import text_env_of

RewardMode = Literal["return", "success", "process"]
REWARD_MODES: tuple[str, ...] = ("return", "success", "process")

TOOL_HINT = (
    "Take each turn by calling the `act` tool with your move as its `action` argument; the tool "
    "returns what happens next. Stop calling it when the episode is over."
)
"""Appended to the env's system prompt by :func:`grpo_dataset`: how turns map onto the tool."""

ENDED = "The episode is over; no action was taken. Do not call act again."


def end_note(success: bool, truncated: bool) -> str:
    """What :meth:`TRLEnvironment.act` appends to an episode's last observation: that the
    episode is over, and why. A hidden budget's end shows nowhere else, so a model can only
    know from this that the episode ended (the SFT warm start shows it before its closing
    reply, as GRPO does)."""
    why = (
        "the task is solved"
        if success
        else ("the turn budget is spent" if truncated else "a terminal state was reached")
    )
    return f"[The episode is over: {why}.]"


def _build(
    env: str | gym.Env[str, str] | Callable[[], gym.Env[str, str]], env_kwargs: dict[str, Any]
) -> gym.Env[str, str]:
    if isinstance(env, str):
        return gym.make(env, disable_env_checker=True, **env_kwargs)
    if env_kwargs:
        raise ValueError("env_kwargs only apply when env is an id")
    if isinstance(env, gym.Env):
        return env
    if callable(env):
        made = env()
        if not isinstance(made, gym.Env):
            raise TypeError(f"the env factory returned {type(made).__name__}, not a gym.Env")
        return made
    raise TypeError(f"env must be an id, a gym.Env or a factory, got {type(env).__name__}")


class TRLEnvironment:
    """One MT/* env as one environment of TRL's ``GRPOTrainer`` (one instance per rollout).

    Args:
        env: an env id (``"MT/FrozenLake-v0"``), a made env (wrappers such as ``BudgetMix`` or
            ``ProcessReward`` included), or a zero-argument factory of one.
        reward: ``"return"`` (sum of the env's rewards over the episode), ``"success"``, or
            ``"process"`` (return + ``step_weight`` x :attr:`process_score`).
        step_weight: the process reward's weight (``reward="process"`` only).
        **env_kwargs: passed to ``gym.make`` when ``env`` is an id (e.g. ``max_turns=8``).

    Use :func:`environment_factory` to get the zero-argument callable TRL wants.
    """

    def __init__(
        self,
        env: str | gym.Env[str, str] | Callable[[], gym.Env[str, str]],
        *,
        reward: RewardMode = "return",
        step_weight: float = 0.0,
        **env_kwargs: Any,
    ) -> None:
        if reward not in REWARD_MODES:
            raise ValueError(f"reward must be one of {REWARD_MODES}, got {reward!r}")
        if not 0.0 <= float(step_weight) < float("inf"):
            raise ValueError(f"step_weight must be a finite number >= 0, got {step_weight!r}")
        self._step_weight = float(step_weight)
        self._env = _build(env, env_kwargs)
        self._base: TextEnv = text_env_of(self._env)
        self._reward_mode = reward
        self._default_budget = (self._base.max_turns, self._base.budget_mode)
        self._return = 0.0
        self._success = False
        self._done = True
        self._turns = 0
        self._infos: list[dict[str, Any]] = []
        self._rewards: list[float] = []
        self._calls = 0

    # ------------------------------------------------------------------ TRL's interface
    def reset(self, **row: Any) -> str:
        """Start the episode of a dataset row; return its first observation.

        Row columns used: ``task_id`` (which task), ``seed`` (the reset seed), ``max_turns`` and
        ``budget_mode`` (this episode's budget; default: the env's own). Others are ignored.
        """
        max_turns = row.get("max_turns")
        mode = row.get("budget_mode")
        if max_turns is not None or mode is not None:
            default_turns, default_mode = self._default_budget
            self._base.set_turn_budget(
                default_turns if max_turns is None else int(max_turns),
                default_mode if mode is None else str(mode),
            )
        else:
            self._base.set_turn_budget(*self._default_budget)
        options = {"task_id": str(row["task_id"])} if row.get("task_id") is not None else None
        seed = row.get("seed")
        observation, info = self._env.reset(
            seed=None if seed is None else int(seed), options=options
        )
        self._return = 0.0
        self._success = bool(info.get("success", False))
        self._done = False
        self._turns = 0
        self._rewards = []
        self._calls = 0
        self._infos = [info]
        return observation

    def act(self, action: str) -> str:
        """Take one turn in the environment with the given action.

        Args:
            action: your move, as text in the format the environment asks for.

        Returns:
            The environment's observation after the move.
        """
        self._calls += 1
        if self._done:
            return ENDED
        text = action if isinstance(action, str) else json.dumps(action, default=str)
        observation, reward, terminated, truncated, info = self._env.step(text)
        self._return += float(reward)
        self._rewards.append(float(reward))
        self._success = bool(info.get("success", False))
        self._turns += 1
        self._infos.append(info)
        if terminated or truncated:
            self._done = True
            return f"{observation}\n\n{end_note(self._success, bool(truncated))}"
        return observation

    def get_reward(self) -> float:
        """The rollout's reward: the episode's return, or its success with ``reward="success"``."""
        if self._reward_mode == "success":
            return 1.0 if self._success else 0.0
        if self._reward_mode == "process":
            return self._return + self._step_weight * self.process_score
        return self._return

    # ------------------------------------------------------------------ inspection (no tools)
    @property
    def env(self) -> gym.Env[str, str]:
        """The (possibly wrapped) env this instance steps."""
        return self._env

    @property
    def messages(self) -> list[dict[str, str]]:
        """The episode so far as chat: user (observation), assistant (action), ..."""
        return self._base.messages()

    @property
    def infos(self) -> list[dict[str, Any]]:
        """The reset ``info`` and one ``info`` per turn taken (step scores, success, ...)."""
        return list(self._infos)

    @property
    def turns(self) -> int:
        """Turns taken in this episode (tool calls that reached the env)."""
        return self._turns

    @property
    def turn_rewards(self) -> list[float]:
        """The env's reward of each turn taken (their sum is the return)."""
        return list(self._rewards)

    @property
    def step_scores(self) -> list[float]:
        """The oracle's score of each turn taken (turns without a score left out)."""
        return [float(i["step_score"]) for i in self._infos[1:] if i.get("step_score") is not None]

    @property
    def mean_step_score(self) -> float:
        """The mean of :attr:`step_scores` (0.0 before the first scored turn)."""
        scores = self.step_scores
        return sum(scores) / len(scores) if scores else 0.0

    @property
    def step_credits(self) -> list[float]:
        """:func:`step_credit` of each turn taken (turns without a score left out)."""
        credits = (step_credit(i) for i in self._infos[1:])
        return [c for c in credits if c is not None]

    @property
    def process_score(self) -> float:
        """The process part of ``reward="process"``: :attr:`step_credits` summed, over the turns
        a solved episode took, and over the budget otherwise (a failure, a spent budget, a
        rollout that stopped calling ``act``: the turns not played earn 0, so ending early by a
        hole or by silence never pays more than playing on); in [0, 1]. Without a budget, the
        mean over the turns taken (which pays a good move followed by silence: give the env a
        budget for training)."""
        credits = self.step_credits
        budget = self._infos[0].get("max_turns") if self._infos else None
        over = self._turns if self._success or not budget else int(budget)
        return sum(credits) / over if over else 0.0

    @property
    def calls(self) -> int:
        """``act`` calls in this episode, those after its end (not turns) included."""
        return self._calls

    @property
    def done(self) -> bool:
        return self._done

    @property
    def success(self) -> bool:
        return self._success

    def _close(self) -> None:
        self._env.close()


def step_credit(info: dict[str, Any]) -> float | None:
    """What one turn earns in a process reward: its oracle ``step_score``, except 0 for an
    unparsable reply (not a move, whatever the oracle says of a wasted turn) and for a turn
    taken from a state already lost (``info["state_value"] == 0`` where the env reports it,
    FrozenLake does: there the oracle scores every move 1.0). ``None`` without a score."""
    score = info.get("step_score")
    if score is None:
        return None
    if info.get("parse_error") or info.get("state_value") == 0.0:
        return 0.0
    return float(score)


def environment_factory(
    env: str | Callable[[], gym.Env[str, str]],
    *,
    reward: RewardMode = "return",
    step_weight: float = 0.0,
    **env_kwargs: Any,
) -> Callable[[], TRLEnvironment]:
    """The zero-argument callable for ``GRPOTrainer(environment_factory=...)``.

    ``env`` is an id (with ``env_kwargs`` for ``gym.make``) or a factory building a fresh
    (wrapped) env; TRL calls the result once per concurrent rollout.
    """
    if not isinstance(env, str) and env_kwargs:
        raise ValueError("env_kwargs only apply when env is an id")

    def make() -> TRLEnvironment:
        return TRLEnvironment(env, reward=reward, step_weight=step_weight, **env_kwargs)

    return make


def grpo_rows(
    env: str | gym.Env[str, str],
    tasks: Sequence[str],
    *,
    seeds: Sequence[int] | None = None,
    budgets: Sequence[int | None] | None = None,
    system_prompt: str | None = None,
    **env_kwargs: Any,
) -> list[dict[str, Any]]:
    """Dataset rows for GRPO: one per task, each with a chat ``prompt`` and the reset columns.

    The prompt is the env's system prompt plus :data:`TOOL_HINT` and an empty user message (TRL
    appends the first observation, returned by ``reset``, to it). ``seeds`` default to
    ``0..n-1``; ``budgets`` fills a per-row ``max_turns`` column (``None`` entries: the env's
    default). ``env_kwargs`` go to ``gym.make`` when ``env`` is an id.
    """
    made = gym.make(env, disable_env_checker=True, **env_kwargs) if isinstance(env, str) else env
    try:
        base = text_env_of(made)
        system = system_prompt if system_prompt is not None else base.system_prompt()
    finally:
        if isinstance(env, str):
            made.close()
    system = f"{system}\n\n{TOOL_HINT}" if system else TOOL_HINT
    seeds = list(range(len(tasks))) if seeds is None else list(seeds)
    per_row = [None] * len(tasks) if budgets is None else list(budgets)
    if len(seeds) != len(tasks) or len(per_row) != len(tasks):
        raise ValueError("seeds and budgets need one entry per task")
    rows = []
    for task_id, seed, budget in zip(tasks, seeds, per_row):
        row: dict[str, Any] = {
            "prompt": [
                {"role": "system", "content": system},
                {"role": "user", "content": ""},
            ],
            "task_id": str(task_id),
            "seed": int(seed),
        }
        if budgets is not None:
            row["max_turns"] = None if budget is None else int(budget)
        rows.append(row)
    return rows


def grpo_dataset(env: str | gym.Env[str, str], tasks: Sequence[str], **kwargs: Any) -> Any:
    """:func:`grpo_rows` as a ``datasets.Dataset`` (what ``GRPOTrainer`` takes)."""
    from datasets import Dataset

    return Dataset.from_list(grpo_rows(env, tasks, **kwargs))
