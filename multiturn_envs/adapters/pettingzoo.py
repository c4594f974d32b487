"""PettingZoo adapters: any MT/* env as a one-agent Parallel/AEC env, and a head-to-head env.

PettingZoo's ``api_test`` calls ``.dtype`` on observations, so a raw ``str`` observation crashes
it; observations here are ``{"text": str}`` in a ``Dict({"text": UnicodeText()})`` space, the
form its tests accept. Spaces are cached per agent (``api_test`` requires the same object on
every call).

* :func:`parallel_env` / :func:`aec_env`: one agent, ``"agent_0"``, playing the env.
* :class:`HeadToHeadEnv`: two agents act from the **same state** each turn; the oracle scores
  both actions (``score_action``), the better one wins the turn (+1 / -1, 0 for a tie within
  ``epsilon``), and the episode advances with the winning action (ties: a seeded coin). A
  same-state comparison that runs inside any PettingZoo tooling.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from pettingzoo import ParallelEnv
from pettingzoo.utils.conversions import parallel_to_aec
from pettingzoo.utils.env import AECEnv

import multiturn_envs  # noqa: F401  (registers the MT/* ids)
from multiturn_envs.core import TextEnv
from multiturn_envs.episode import make_env
from multiturn_envs.spaces import UnicodeText
from multiturn_envs.wrappers.turn_budget import text_env_of

_HEAD_TO_HEAD_STREAM = 0x4848


def _text_space() -> spaces.Dict:
    return spaces.Dict({"text": UnicodeText()})


def _make(env: str | gym.Env[str, str], env_kwargs: dict[str, Any]) -> gym.Env[str, str]:
    if isinstance(env, str):
        return make_env(env, env_kwargs, checker=True)  # PettingZoo's tests check it too
    if env_kwargs:
        raise ValueError("env_kwargs only apply when env is an id")
    return env


class _TextSpaces:
    """Every agent of our adapters observes a text dict and answers with text."""

    _obs_space: spaces.Space[Any]  # per instance: a space carries its own seedable RNG
    _act_space: spaces.Space[Any]

    def _init_spaces(self, env: gym.Env[str, str]) -> None:
        self._obs_space = _text_space()
        self._act_space = env.action_space  # the env's own: its sample() suits the env

    def observation_space(self, agent: str) -> spaces.Space[Any]:
        return self._obs_space

    def action_space(self, agent: str) -> spaces.Space[Any]:
        return self._act_space


class TextParallelEnv(_TextSpaces, ParallelEnv[str, dict[str, str], str]):
    """One agent playing an MT/* env, as a PettingZoo ``ParallelEnv``.

    Args:
        env: an env id (``"MT/FrozenLake-v0"``) or a made env.
        agent: the agent's name.
        **env_kwargs: passed to ``gym.make`` when ``env`` is an id.
    """

    metadata: dict[str, Any] = {"name": "multiturn_envs_text_v0", "render_modes": []}  # noqa: RUF012

    def __init__(
        self, env: str | gym.Env[str, str], agent: str = "agent_0", **env_kwargs: Any
    ) -> None:
        self.env = _make(env, env_kwargs)
        self.possible_agents = [agent]
        self.agents: list[str] = []
        self._init_spaces(self.env)

    def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, dict[str, str]], dict[str, dict[str, Any]]]:
        obs, info = self.env.reset(seed=seed, options=options)
        self.agents = list(self.possible_agents)
        agent = self.agents[0]
        return {agent: {"text": obs}}, {agent: info}

    def step(self, actions: dict[str, str]) -> tuple[dict[str, Any], ...]:
        if not self.agents:
            raise gym.error.ResetNeeded("the episode has ended; call reset()")
        agent = self.agents[0]
        obs, reward, terminated, truncated, info = self.env.step(actions[agent])
        if terminated or truncated:
            self.agents = []
        return (
            {agent: {"text": obs}},
            {agent: float(reward)},
            {agent: bool(terminated)},
            {agent: bool(truncated)},
            {agent: info},
        )

    def close(self) -> None:
        self.env.close()


def parallel_env(env: str | gym.Env[str, str], **kwargs: Any) -> TextParallelEnv:
    """An MT/* env as a one-agent PettingZoo ``ParallelEnv``."""
    return TextParallelEnv(env, **kwargs)


def aec_env(env: str | gym.Env[str, str], **kwargs: Any) -> AECEnv[str, dict[str, str], str]:
    """An MT/* env as a one-agent PettingZoo ``AECEnv``."""
    return parallel_to_aec(TextParallelEnv(env, **kwargs))


class HeadToHeadEnv(_TextSpaces, ParallelEnv[str, dict[str, str], str]):
    """Two agents act from the same state each turn; the oracle judges.

    Each turn both agents see the same observation and submit an action. Both are scored with
    the env's ``score_action`` at that state; the higher score wins the turn (reward +1 for the
    winner, -1 for the loser, 0 each when the scores are within ``epsilon``), and the episode
    continues with the winner's action (on a tie, a coin from the reset seed picks). The infos
    carry both scores and the action played. The episode ends when the underlying env does.

    Args:
        env: an env id or a made MT/* env.
        epsilon: margin under which two scores tie.
        agents: the two agents' names.
        **env_kwargs: passed to ``gym.make`` when ``env`` is an id.
    """

    metadata: dict[str, Any] = {"name": "multiturn_envs_head_to_head_v0", "render_modes": []}  # noqa: RUF012

    def __init__(
        self,
        env: str | gym.Env[str, str],
        epsilon: float = 1e-9,
        agents: tuple[str, str] = ("player_0", "player_1"),
        **env_kwargs: Any,
    ) -> None:
        self.env = _make(env, env_kwargs)
        self.base: TextEnv = text_env_of(self.env)
        self.epsilon = float(epsilon)
        self.possible_agents = list(agents)
        self.agents: list[str] = []
        self._init_spaces(self.env)
        self._rng = np.random.default_rng()

    def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, dict[str, str]], dict[str, dict[str, Any]]]:
        if seed is not None:
            self._rng = np.random.default_rng(np.random.SeedSequence([seed, _HEAD_TO_HEAD_STREAM]))
        obs, info = self.env.reset(seed=seed, options=options)
        self.agents = list(self.possible_agents)
        return {a: {"text": obs} for a in self.agents}, {a: dict(info) for a in self.agents}

    def step(self, actions: dict[str, str]) -> tuple[dict[str, Any], ...]:
        if not self.agents:
            raise gym.error.ResetNeeded("the episode has ended; call reset()")
        first, second = self.possible_agents
        scores = {a: self.base.score_action(actions[a]) for a in (first, second)}
        gap = scores[first] - scores[second]
        if abs(gap) <= self.epsilon:
            rewards = {first: 0.0, second: 0.0}
            winner = first if self._rng.random() < 0.5 else second
        else:
            winner = first if gap > 0 else second
            loser = second if winner == first else first
            rewards = {winner: 1.0, loser: -1.0}
        obs, _, terminated, truncated, info = self.env.step(actions[winner])
        info = {**info, "scores": scores, "played": winner}
        agents = list(self.agents)
        if terminated or truncated:
            self.agents = []
        return (
            {a: {"text": obs} for a in agents},
            rewards,
            {a: bool(terminated) for a in agents},
            {a: bool(truncated) for a in agents},
            {a: dict(info) for a in agents},
        )

    def close(self) -> None:
        self.env.close()
