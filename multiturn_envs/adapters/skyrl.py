"""SkyRL-gym adapter: any MT/* env as a ``skyrl_gym`` ``BaseTextEnv``, registered by its MT id.

SkyRL's generator (``skyrl_gym_generator.py``) runs a trajectory as ``env = skyrl_gym.make(
row["env_class"], env_config=cfg, extras=row)``, ``prompt, _ = env.init(row["prompt"])``, then
``env.step(llm_text)`` until ``done``; every dataset column other than ``prompt`` and
``env_class`` arrives in ``extras``. :class:`MTSkyRLEnv` maps that onto the env contract:

* ``init(prompt)`` starts the row's episode (the episode kit's one reader,
  :class:`~multiturn_envs.episode.EpisodeStart`: ``task_id``, ``seed``, the budget,
  ``error_after``, ``reward``) and returns the prompt with the first observation as the last
  user message (it fills an empty trailing user message, else appends one; an empty prompt
  gets the env's system prompt first).
* ``step(text)`` is one env turn: ``reward`` is that turn's credit under a registered reward
  (:mod:`multiturn_envs.rewards`, kept as a running tally from the reset on, so the step
  rewards of an episode sum to the reward's score of it): the row's ``reward`` or the env's
  (``reward="process"`` for the study's process reward, any other name, spec or object); by
  default the registry's ``shaped`` reward of weight 0 (the env's reward plus ``weight`` x the
  oracle's raw step score: what this adapter always paid, which is *not* the process reward;
  ``step_score_weight`` is its old spelling), ``done`` is ``terminated or truncated``
  (SkyRL has no other turn cap, so the env's budget ends episodes), ``observations`` is the next
  observation as a user message (empty once done, as SkyRL's own envs do), ``metadata`` the
  env's ``info`` (which SkyRL does not read; :meth:`get_metrics` carries what it logs).
* SkyRL overwrites ``extras["max_turns"]`` with its generator's ``max_turns``, so the row's turn
  budget goes in the namespaced spelling ``mt_max_turns`` (any field may be written so; with
  ``budget_mode``, passed as reset options: the row's budget wins over the env's wrappers and
  defaults, for that episode only); SkyRL also
  replaces registered ``env_config`` with its own, so the env id and ``gym.make`` kwargs are
  separate keyword arguments (``env_id``, ``env_kwargs``) that survive ``make``.
* ``get_metrics()``, read from the episode's :class:`~multiturn_envs.episode.EpisodeLog`
  (:attr:`MTSkyRLEnv.log`): ``success`` (what a pass means: SkyRL's ``pass_at_n`` counts any
  positive last reward, which shaped rewards inflate), ``turns``, ``return`` (the step
  rewards' sum), ``mean_step_score`` (the registry's) and ``agent_stopped``.
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

import warnings
from typing import Any

import gymnasium as gym
from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput, ConversationType

import multiturn_envs
from multiturn_envs.episode import EpisodeLog, EpisodeStart, make_env
from multiturn_envs.policies.tool_layout import hermes_system, parse_hermes, replies_stop
from multiturn_envs.rewards import Episode, Reward, RewardSpec, Shaped, make_reward
from multiturn_envs.wrappers.turn_budget import text_env_of

ENTRY_POINT = "multiturn_envs.adapters.skyrl:MTSkyRLEnv"
OWNED = frozenset({"max_turns"})
"""Row fields SkyRL uses for its own purpose: ours are read from ``mt_<field>`` only."""


def _shaped(step_score_weight: float | None) -> Reward:
    """The default reward: ``shaped`` of weight ``step_score_weight`` (its old spelling)."""
    if step_score_weight is None:
        return Shaped(weight=0.0)
    warnings.warn(
        "step_score_weight is deprecated: name the weight in the reward, "
        f"reward={{'name': 'shaped', 'weight': {step_score_weight!r}}}",
        DeprecationWarning,
        stacklevel=3,
    )
    return Shaped(weight=float(step_score_weight))


class MTSkyRLEnv(BaseTextEnv):
    """One MT/* env as a SkyRL-gym text env (one instance per trajectory).

    Args:
        env_config: SkyRL's per-env-class config (unused: SkyRL hands custom envs ``{}``).
        extras: the dataset row's other columns, read by
            :class:`~multiturn_envs.episode.EpisodeStart` (``task_id``, ``seed``,
            ``mt_max_turns``, ``budget_mode``, ``error_after``, ``reward``) plus ``tools``;
            everything else is ignored.
        env_id: the MT env (registration passes it).
        env_kwargs: ``gym.make`` keyword arguments.
        step_score_weight: deprecated spelling of ``reward={"name": "shaped", "weight": w}``.
        reward: a registered reward (name, ``{"name": ..., **params}`` or object) whose
            per-turn credits are the step rewards, e.g. ``"process"`` (default: ``shaped`` of
            weight 0, the env's own reward); a row's ``reward`` wins.
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
        step_score_weight: float | None = None,
        reward: RewardSpec | None = None,
        tools: bool = False,
    ) -> None:
        super().__init__()
        self.extras = dict(extras or {})
        self.tools = bool(self.extras.get("tools", tools))
        self.env_id = env_id
        self.start = EpisodeStart.from_row(self.extras, owned=OWNED)
        configured = _shaped(step_score_weight) if reward is None else make_reward(reward)
        self.reward: Reward = self.start.reward_or(configured)
        self.env: gym.Env[str, str] = make_env(env_id, env_kwargs)
        self.base = text_env_of(self.env)
        budget = self.start.budget(self.base.default_budget)[0]
        self.max_turns = budget if budget is not None else 0
        self.log = EpisodeLog(self.reward)
        """How the episode runs: what :meth:`get_metrics` reads."""
        self.done = False

    def init(self, prompt: ConversationType | None) -> tuple[ConversationType, dict[str, Any]]:
        """Reset on the row's task and seed; the prompt with the first observation appended."""
        observation, info = self.start.reset(self.env)
        self.log.begin(info, seed=self.start.seed)
        self.turns = 0
        self.done = False
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
                self.done = True
                self.log.stop("agent_stopped")
                return BaseTextEnvStepOutput(
                    observations=[],
                    reward=0.0,
                    done=True,
                    metadata={"agent_stopped": True},
                    postprocessed_action=None,
                )
        if not self.log.start:  # stepped without init: score from the env's current state
            self.log.begin(self.base.current_info())
        observation, reward, terminated, truncated, info = self.env.step(action)
        self.turns += 1
        total = self.log.add(reward, terminated, truncated, info)
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
    def agent_stopped(self) -> bool:
        """Whether the model ended the episode by answering without a tool call."""
        return self.log.end is not None and self.log.end.name == "agent_stopped"

    @property
    def rewards(self) -> list[float]:
        """Each step's reward (the reward's per-turn credit)."""
        return self.log.credits

    @property
    def infos(self) -> list[Any]:
        """The reset ``info`` and each step's."""
        return self.log.infos if self.log.start else []

    @property
    def episode(self) -> Episode:
        """The episode so far as rewards read it (reset ``info`` and each turn taken)."""
        return self.log.episode

    def get_metrics(self) -> dict[str, Any]:
        """SkyRL's per-trajectory metrics, derived from :attr:`log`."""
        log = self.log
        return {
            "success": float(bool(log.start) and log.success),
            "turns": self.turns,
            "return": float(sum(log.credits)),
            "mean_step_score": log.mean_step_score,
            "agent_stopped": float(self.agent_stopped),
        }

    def close(self) -> None:
        self.env.close()


def register_skyrl_envs(
    env_kwargs: dict[str, dict[str, Any]] | None = None,
    step_score_weight: float | None = None,
    reward: RewardSpec | None = None,
    tools: bool = False,
) -> list[str]:
    """Register every MT/* id with ``skyrl_gym`` (idempotent); returns the ids.

    Args:
        env_kwargs: per-id ``gym.make`` keyword arguments, e.g.
            ``{"MT/DeepCoder-v0": {"backend": "docker"}}``.
        step_score_weight: deprecated spelling of ``reward={"name": "shaped", "weight": w}``.
        reward: a registered reward every env pays its steps with (``None``: ``shaped`` of
            weight 0, the env's own reward).
        tools: every env offers its typed tools (a row's ``tools`` column still wins).

    A row then selects an env with ``env_class="MT/FrozenLake-v0"``; ``skyrl_gym.make(id,
    env_kwargs=..., reward=...)`` overrides the registered values.
    """
    if reward is None and step_score_weight is not None:
        reward = _shaped(step_score_weight)
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
                "reward": spec,
                "tools": tools,
            },
        )
    return ids
