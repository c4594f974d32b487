"""TRL's ``GRPOTrainer`` with our envs' per-turn signal: episode logs and GiGPO advantages.

TRL (1.16) scores a multi-turn rollout with one reward and gives every token of it the same
advantage. :class:`MultiTurnGRPOTrainer` keeps TRL's trainer as it is (generation, vLLM, PEFT,
DeepSpeed, the loss) and overrides one private hook, ``_generate_and_score_completions``
(:mod:`multiturn_envs.rl.trl_coupling` states what of TRL's internals that relies on, the
versions it works with, and checks both when the trainer is built):

* it calls TRL's own (environments reset and stepped, rewards, TRL's advantages);
* it logs, per step, what the finished episodes say, read from each environment's
  :class:`~multiturn_envs.episode.EpisodeLog`: ``env/trajectory_reward`` (the rollouts'
  rewards), ``env/success``, ``env/step_score`` (mean oracle step score per episode),
  ``env/process_score`` (the process reward's part), ``env/turns``, ``env/unfinished`` (the
  rollout ended before its episode) and ``env/cut_by_length`` (... because the completion hit
  ``max_completion_length``: such rollouts cannot succeed, so it warns);
* with ``advantage="gigpo"`` it replaces TRL's (B,) advantages by (B,T) token advantages: each
  turn's tokens get ``A_episode + step_weight * A_step`` from
  :func:`~multiturn_envs.rl.gigpo.gigpo_advantages`. TRL's loss accepts (B,T) advantages.

How a rollout maps onto turns. A rollout is one completion: model tokens (the loss mask
``completion_mask * tool_mask`` is 1) alternate with tool-result tokens (0). Each maximal run of
model tokens is one assistant message: message ``i < env.turns`` is the call that took turn
``i``; later messages (calls after the episode ended, the closing reply) get the episode
advantage. If the count does not fit (``spans`` not ``calls`` or ``calls + 1``, where ``calls``
counts every ``act`` call that ran: a call with bad arguments, two calls in one message) the
whole rollout gets its episode advantage and ``gigpo/misaligned`` counts it.

The anchor of turn ``t`` is the state it was taken from: ``info["state_key"]`` of the info before
it, joined with ``turns_left`` there, because the oracle's value of a state depends on the turns
left (FrozenLake's ``Q_h``): two visits of one cell with different budgets left are different
states. The step rewards of GiGPO's return-to-go are the per-turn credits of a registered reward
(``step_reward``, :mod:`multiturn_envs.rewards`): ``"outcome"``, the env's reward of the turn
(critic-free as in the paper), by default; ``"step_credit"``, the oracle's score as the process
reward credits it; or any other. The episode part normalises each rollout's own reward
(``get_reward()``), whichever reward the run trains with: the estimator and the reward are
independent choices.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from trl import GRPOTrainer

from multiturn_envs.adapters.trl import TRLEnvironmentBase
from multiturn_envs.rewards import Reward, make_reward, process_score
from multiturn_envs.rl.config import ADVANTAGES
from multiturn_envs.rl.gigpo import StepAdvantages, Trajectory, gigpo_advantages
from multiturn_envs.rl.trl_coupling import check_trl


def anchor_of(info: Mapping[str, Any]) -> str:
    """The exact GiGPO anchor of the state ``info`` describes: its key and the turns left."""
    return f"{info.get('state_key')}|{info.get('turns_left')}"


def model_spans(mask: Sequence[int]) -> list[tuple[int, int]]:
    """``[start, end)`` of each maximal run of 1s in a loss-mask row (one per assistant message)."""
    spans: list[tuple[int, int]] = []
    start: int | None = None
    for i, bit in enumerate(mask):
        if bit and start is None:
            start = i
        elif not bit and start is not None:
            spans.append((start, i))
            start = None
    if start is not None:
        spans.append((start, len(mask)))
    return spans


def model_token_mask(out: Mapping[str, Any]) -> np.ndarray:
    """(B,T) 1 where the model wrote the token (TRL's ``completion_mask`` x ``tool_mask``): its
    runs are the rollout's assistant messages (:func:`model_spans`)."""
    mask = out["completion_mask"]
    if out.get("tool_mask") is not None:
        mask = mask * out["tool_mask"]
    rows: np.ndarray = mask.detach().cpu().numpy()
    return rows


def cut_by_length(length: int, spans: int, calls: int, done: bool, limit: int) -> bool:
    """Whether TRL's length cap, not the model or the env, ended a rollout.

    Its episode was still running, and either the completion reached ``limit`` tokens or its
    last model message was a call whose result never came back (TRL drops a tool result that
    would pass the cap and stops): ``spans`` (model messages) is at most ``calls``. A rollout
    that ended by answering without a call has one span more than its calls.
    """
    if done:
        return False
    return length >= limit or (calls > 0 and spans <= calls)


def step_reward_of(step_reward: str | Reward) -> Reward:
    """A registered reward for GiGPO's step returns (old names ``"env"``/``"step_score"`` too,
    with a warning: :data:`~multiturn_envs.rewards.OLD_NAMES`)."""
    return make_reward(step_reward)


def trajectory_of(env: TRLEnvironmentBase, step_reward: str | Reward = "outcome") -> Trajectory:
    """One finished rollout of a :class:`~multiturn_envs.adapters.trl.TRLEnvironment` as a
    GiGPO trajectory, read from its log: anchors before each turn, the step reward's credit of
    each turn, and the rollout's own reward (``get_reward()``) as the episode's return."""
    log = env.log
    infos = log.infos if log.start else []
    anchors = [anchor_of(infos[t]) for t in range(len(infos) - 1)]
    rewards = step_reward_of(step_reward).credits(log.episode)
    return Trajectory(anchors=anchors, rewards=rewards, episode_return=float(env.get_reward()))


def episode_figures(envs: Sequence[TRLEnvironmentBase]) -> dict[str, float]:
    """The ``env/*`` figures of a generation batch: the means over its rollouts' logs."""
    return {
        "env/trajectory_reward": float(np.mean([e.get_reward() for e in envs])),
        "env/success": float(np.mean([e.log.success for e in envs])),
        "env/step_score": float(np.mean([e.log.mean_step_score for e in envs])),
        "env/process_score": float(np.mean([process_score(e.log.episode) for e in envs])),
        "env/turns": float(np.mean([len(e.log.turns) for e in envs])),
        "env/unfinished": float(np.mean([not e.done for e in envs])),
    }


def group_advantages(
    envs: Sequence[TRLEnvironmentBase],
    group_size: int,
    *,
    step_reward: str | Reward = "outcome",
    gamma: float = 0.95,
    step_weight: float = 1.0,
) -> list[StepAdvantages]:
    """GiGPO advantages of finished rollouts, ``group_size`` consecutive ones per GRPO group
    (TRL's order: the G rollouts of a row are adjacent); one :class:`StepAdvantages` a group."""
    if group_size < 1 or len(envs) % group_size:
        raise ValueError(f"{len(envs)} rollouts do not split into groups of {group_size}")
    reward = step_reward_of(step_reward)
    trajectories = [trajectory_of(e, reward) for e in envs]
    return [
        gigpo_advantages(
            trajectories[start : start + group_size], gamma=gamma, step_weight=step_weight
        )
        for start in range(0, len(envs), group_size)
    ]


def token_advantages(
    loss_mask: np.ndarray,
    calls: Sequence[int],
    per_turn: Sequence[np.ndarray],
    episode: Sequence[float],
) -> tuple[np.ndarray, int]:
    """(B,T) advantages from per-turn ones; returns them and how many rows did not align.

    Row ``i``: ``calls[i]`` tool calls ran, the first ``len(per_turn[i])`` of them took turns.
    """
    out = np.zeros(loss_mask.shape, dtype=np.float32)
    misaligned = 0
    for row in range(loss_mask.shape[0]):
        out[row, :] = episode[row]
        spans = model_spans(loss_mask[row].tolist())
        if len(spans) not in (calls[row], calls[row] + 1):
            misaligned += 1
            continue
        for i, (start, end) in enumerate(spans[: len(per_turn[row])]):
            out[row, start:end] = per_turn[row][i]
    return out, misaligned


class MultiTurnGRPOTrainer(GRPOTrainer):  # type: ignore[misc]
    """``GRPOTrainer`` plus per-episode logs and, optionally, GiGPO step-level advantages.

    Args (beyond ``GRPOTrainer``'s, which pass through unchanged):
        advantage: ``"grpo"`` (TRL's own) or ``"gigpo"``.
        gigpo_step_weight, gigpo_gamma: GiGPO's omega and discount (paper: 1.0 and 0.95).
        step_reward: the registered reward whose per-turn credits GiGPO's return-to-go sums
            (a name or object; default ``"outcome"``, the env's reward).
        on_step: called after each generation batch with the logged episode figures.
    """

    def __init__(
        self,
        *args: Any,
        advantage: str = "grpo",
        gigpo_step_weight: float = 1.0,
        gigpo_gamma: float = 0.95,
        step_reward: str | Reward = "outcome",
        on_step: Callable[[dict[str, float]], None] | None = None,
        **kwargs: Any,
    ) -> None:
        if advantage not in ADVANTAGES:
            raise ValueError(f"advantage must be one of {ADVANTAGES}, got {advantage!r}")
        check_trl()  # the private surface below: fail clearly if TRL moved it
        step = step_reward_of(step_reward)
        super().__init__(*args, **kwargs)
        if advantage == "gigpo" and self.accelerator.num_processes > 1:
            raise NotImplementedError(
                "GiGPO here needs one process: a GRPO group may straddle ranks (gather the "
                "environments first to extend it)"
            )
        self.advantage = advantage
        self.gigpo_step_weight = float(gigpo_step_weight)
        self.gigpo_gamma = float(gigpo_gamma)
        self.step_reward = step
        self.on_step = on_step
        self._warned_cut = False
        self.last_token_advantages: Any = None
        """The (B,T) advantages of the last GiGPO batch (for inspection and tests)."""

    def _generate_and_score_completions(self, inputs: Any) -> dict[str, Any]:
        out: dict[str, Any] = super()._generate_and_score_completions(inputs)
        envs: list[TRLEnvironmentBase] = list(self.environments or [])
        if not envs:
            return out
        mode = "train" if self.model.training else "eval"
        figures = episode_figures(envs)
        figures["env/cut_by_length"] = self._cut_by_length(out, envs)
        if self.advantage == "gigpo" and mode == "train":
            figures.update(self._gigpo(out, envs))
        for name, value in figures.items():
            self._metrics[mode][name].append(value)
        if self.on_step is not None:
            self.on_step(figures)
        return out

    def _cut_by_length(self, out: dict[str, Any], envs: list[TRLEnvironmentBase]) -> float:
        """The share of rollouts :func:`cut_by_length` says the length cap ended; warns once."""
        limit = int(self.args.max_completion_length)
        ids = out["completion_ids"]
        pad = getattr(self.processing_class, "pad_token_id", None)
        lengths = (ids != pad).sum(dim=1).tolist() if pad is not None else [ids.shape[1]] * len(ids)
        if len(lengths) != len(envs):
            return 0.0
        rows = model_token_mask(out)
        cut = float(
            np.mean(
                [
                    cut_by_length(n, len(model_spans(row.tolist())), e.calls, e.done, limit)
                    for n, row, e in zip(lengths, rows, envs)
                ]
            )
        )
        if cut > 0 and not self._warned_cut:
            self._warned_cut = True
            warnings.warn(
                f"{cut:.0%} of rollouts hit max_completion_length={limit} before their episode "
                "ended (it counts every turn and tool result): raise it, or they cannot succeed",
                stacklevel=2,
            )
        return cut

    def _gigpo(self, out: dict[str, Any], envs: list[TRLEnvironmentBase]) -> dict[str, float]:
        import torch

        g = int(self.num_generations)
        if len(envs) % g or len(envs) != out["completion_ids"].shape[0]:
            raise RuntimeError(
                f"{len(envs)} environments for {out['completion_ids'].shape[0]} rollouts in "
                f"groups of {g}: cannot align GiGPO groups"
            )
        per_turn: list[np.ndarray] = []
        episode: list[float] = []
        for adv in group_advantages(
            envs,
            g,
            step_reward=self.step_reward,
            gamma=self.gigpo_gamma,
            step_weight=self.gigpo_step_weight,
        ):
            per_turn += adv.combined
            episode += adv.episode
        tokens, misaligned = token_advantages(
            model_token_mask(out), [e.calls for e in envs], per_turn, episode
        )
        out["advantages"] = torch.tensor(tokens, device=out["completion_ids"].device)
        self.last_token_advantages = out["advantages"]
        anchored = [
            float(np.mean(np.abs(s))) for s in per_turn if len(s)
        ]  # the step part's size shows whether anchors repeat at all
        return {
            "gigpo/misaligned": misaligned / len(envs),
            "gigpo/mean_abs_advantage": float(np.mean(anchored)) if anchored else 0.0,
        }
