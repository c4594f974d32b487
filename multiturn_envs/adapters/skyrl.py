"""SkyRL-gym adapter: any MT/* env as a ``skyrl_gym`` ``BaseTextEnv``, registered by its MT id.

SkyRL's generator (``skyrl_gym_generator.py``) runs a trajectory as ``env = skyrl_gym.make(
row["env_class"], env_config=cfg, extras=row)``, ``prompt, _ = env.init(row["prompt"])``, then
``env.step(llm_text)`` until ``done``; every dataset column other than ``prompt`` and
``env_class`` arrives in ``extras``. :class:`MTSkyRLEnv` maps that onto the env contract:

* ``init(prompt)`` resets the env with the row's ``task_id`` and ``seed`` and returns the
  prompt with the first observation as the last user message (it fills an empty trailing user
  message, else appends one; an empty prompt gets the env's system prompt first).
* ``step(text)`` is one env turn: ``reward`` is that turn's credit under a registered reward
  (:mod:`multiturn_envs.rewards`, kept as a running tally from the reset on, so the step
  rewards of an episode sum to the reward's score of it): ``reward="process"`` for the study's
  process reward, any other name or object; by default the registry's ``shaped`` reward with
  ``weight=step_score_weight`` (the env's reward plus ``step_score_weight`` x the oracle's raw
  step score: what this adapter always paid, which is *not* the process reward), ``done`` is
  ``terminated or truncated``
  (SkyRL has no other turn cap, so the env's budget ends episodes), ``observations`` is the next
  observation as a user message (empty once done, as SkyRL's own envs do), ``metadata`` the
  env's ``info`` (which SkyRL does not read; :meth:`get_metrics` carries what it logs).
* SkyRL overwrites ``extras["max_turns"]`` with its generator's ``max_turns``, so the row's turn
  budget goes in ``mt_max_turns`` (with ``budget_mode``, passed as reset options: the row's
  budget wins over the env's wrappers and defaults, for that episode only); SkyRL also
  replaces registered ``env_config`` with its own, so the env id and ``gym.make`` kwargs are
  separate keyword arguments (``env_id``, ``env_kwargs``) that survive ``make``.
* ``get_metrics()``: ``success`` (what a pass means: SkyRL's ``pass_at_n`` counts any positive
  last reward, which shaped rewards inflate), ``turns``, ``return`` (the step rewards' sum),
  ``mean_step_score`` (the registry's) and ``agent_stopped``.
* Tools (``tools=True``, or a row's ``tools`` column): SkyRL's generator does no function
  calling (it applies the chat template without ``tools``), so the env's typed tools go into
  the system message in the Hermes/Qwen wording (a system message of the row gets them
  appended), each LLM reply is read with the Hermes parser (its ``<tool_call>`` blocks are
  the action), and an observation comes back as a ``<tool_response>`` user message, the text
  a Qwen-style template renders for a tool result. A reply without a call ends the episode
  where the env says so (``done``, reward 0, ``metadata["agent_stopped"]``): the harness's and
  TRL's rule.

Install: ``pip install skyrl-gym`` (extra ``[skyrl]``). Call :func:`register_skyrl_envs` in the
process that builds envs (SkyRL: inside the Ray entrypoint, before training starts).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput, ConversationType

import multiturn_envs
from multiturn_envs.policies.tool_layout import hermes_system, parse_hermes, replies_stop
from multiturn_envs.rewards import Episode, MeanStepScore, Reward, Shaped, Tally, Turn, make_reward
from multiturn_envs.rewards.registry import RewardSpec
from multiturn_envs.wrappers.turn_budget import text_env_of

ENTRY_POINT = "multiturn_envs.adapters.skyrl:MTSkyRLEnv"


class MTSkyRLEnv(BaseTextEnv):
    """One MT/* env as a SkyRL-gym text env (one instance per trajectory).

    Args:
        env_config: SkyRL's per-env-class config (unused: SkyRL hands custom envs ``{}``).
        extras: the dataset row's other columns: ``task_id``, ``seed``, ``mt_max_turns``,
            ``budget_mode`` are read; everything else is ignored.
        env_id: the MT env (registration passes it).
        env_kwargs: ``gym.make`` keyword arguments.
        step_score_weight: with no ``reward``: each step pays the env reward + this x the
            oracle's step score (the registry's ``shaped`` reward).
        reward: a registered reward (name, ``{"name": ..., **params}`` or object) whose
            per-turn credits are the step rewards, e.g. ``"process"``.
        tools: offer the env's typed tools and read Hermes tool calls (module docstring); a
            row's ``tools`` column wins.
    """

    def __init__(
        self,
        env_config: Any = None,
        extras: dict[str, Any] | None = None,
        *,
        env_id: str,
        env_kwargs: dict[str, Any] | None = None,
        step_score_weight: float = 0.0,
        reward: RewardSpec | None = None,
        tools: bool = False,
    ) -> None:
        super().__init__()
        self.extras = dict(extras or {})
        self.tools = bool(self.extras.get("tools", tools))
        self.agent_stopped = False
        self.env_id = env_id
        self.step_score_weight = float(step_score_weight)
        self.reward: Reward = (
            Shaped(weight=self.step_score_weight) if reward is None else make_reward(reward)
        )
        self.env: gym.Env[str, str] = gym.make(
            env_id, disable_env_checker=True, **dict(env_kwargs or {})
        )
        self.base = text_env_of(self.env)
        self.budget_options: dict[str, Any] = {}
        if self.extras.get("mt_max_turns") is not None:
            self.budget_options["max_turns"] = int(self.extras["mt_max_turns"])
        if self.extras.get("budget_mode") is not None:
            self.budget_options["budget_mode"] = str(self.extras["budget_mode"])
        budget = self.budget_options.get("max_turns", self.base.default_budget[0])
        self.max_turns = budget if budget is not None else 0
        self.infos: list[dict[str, Any]] = []
        self.rewards: list[float] = []
        self.done = False
        self._tally: Tally | None = None
        self._turns: list[Turn] = []

    def init(self, prompt: ConversationType | None) -> tuple[ConversationType, dict[str, Any]]:
        """Reset on the row's task and seed; the prompt with the first observation appended."""
        task_id = self.extras.get("task_id")
        seed = self.extras.get("seed")
        options = dict(self.budget_options)
        if task_id is not None:
            options["task_id"] = str(task_id)
        observation, info = self.env.reset(
            seed=None if seed is None else int(seed), options=options or None
        )
        self.turns = 0
        self.infos = [info]
        self.rewards = []
        self.done = False
        self.agent_stopped = False
        self._tally = self.reward.tally(info)
        self._turns = []
        conversation = [dict(m) for m in (prompt or [])]
        if (
            conversation
            and conversation[-1].get("role") == "user"
            and not conversation[-1].get("content")
        ):
            conversation[-1] = {"role": "user", "content": observation}
        else:
            system = self.base.tool_system_prompt() if self.tools else self.base.system_prompt()
            if not conversation and system:
                conversation.append({"role": "system", "content": system})
            conversation.append({"role": "user", "content": observation})
        if self.tools:
            tools = self.base.tools()
            if conversation[0].get("role") == "system":
                first = str(conversation[0].get("content") or "")
                conversation[0] = {"role": "system", "content": hermes_system(first, tools)}
            else:
                conversation.insert(0, {"role": "system", "content": hermes_system("", tools)})
        return conversation, dict(info)

    def step(self, action: str) -> BaseTextEnvStepOutput:
        """One env turn with the model's text (with tools: its tool calls)."""
        if self.tools:
            action, calls = parse_hermes(action)
            if replies_stop(
                calls if calls is not None else [], action, self.base.reply_without_call
            ):
                self.done = self.agent_stopped = True
                return BaseTextEnvStepOutput(
                    observations=[],
                    reward=0.0,
                    done=True,
                    metadata={"agent_stopped": True},
                    postprocessed_action=None,
                )
        observation, reward, terminated, truncated, info = self.env.step(action)
        self.turns += 1
        turn = Turn(float(reward), info, bool(terminated), bool(truncated))
        if self._tally is None:  # stepped without init: score from the env's current state
            self._tally = self.reward.tally(self.base.current_info())
        total = self._tally.add(turn)
        self._turns.append(turn)
        self.rewards.append(total)
        self.infos.append(info)
        self.done = bool(terminated or truncated)
        metadata = dict(info)
        metadata["observation"] = observation
        shown = f"<tool_response>\n{observation}\n</tool_response>" if self.tools else observation
        return BaseTextEnvStepOutput(
            observations=[] if self.done else [{"role": "user", "content": shown}],
            reward=total,
            done=self.done,
            metadata=metadata,
            postprocessed_action=None,
        )

    @property
    def episode(self) -> Episode:
        """The episode so far as rewards read it (reset ``info`` and each turn taken)."""
        return Episode(self.infos[0] if self.infos else {}, tuple(self._turns))

    def get_metrics(self) -> dict[str, Any]:
        return {
            "success": float(bool(self.infos and self.infos[-1].get("success"))),
            "turns": self.turns,
            "return": float(sum(self.rewards)),
            "mean_step_score": MeanStepScore().score(self.episode),
            "agent_stopped": float(self.agent_stopped),
        }

    def close(self) -> None:
        self.env.close()


def register_skyrl_envs(
    env_kwargs: dict[str, dict[str, Any]] | None = None,
    step_score_weight: float = 0.0,
    reward: RewardSpec | None = None,
    tools: bool = False,
) -> list[str]:
    """Register every MT/* id with ``skyrl_gym`` (idempotent); returns the ids.

    Args:
        env_kwargs: per-id ``gym.make`` keyword arguments, e.g.
            ``{"MT/DeepCoder-v0": {"backend": "docker"}}``.
        step_score_weight: the ``shaped`` reward's weight every env gets by default.
        reward: a registered reward every env pays its steps with (``None``: ``shaped``).
        tools: every env offers its typed tools (a row's ``tools`` column still wins).

    A row then selects an env with ``env_class="MT/FrozenLake-v0"``; ``skyrl_gym.make(id,
    env_kwargs=..., step_score_weight=..., reward=...)`` overrides the registered values.
    """
    spec = None if reward is None else make_reward(reward).spec()  # checked now, JSON-able
    import skyrl_gym

    per_id = env_kwargs or {}
    ids = multiturn_envs.env_ids()
    for env_id in ids:
        if env_id in skyrl_gym.registry:
            continue
        skyrl_gym.register(
            id=env_id,
            entry_point=ENTRY_POINT,
            kwargs={
                "env_id": env_id,
                "env_kwargs": dict(per_id.get(env_id, {})),
                "step_score_weight": step_score_weight,
                "reward": spec,
                "tools": tools,
            },
        )
    return ids
