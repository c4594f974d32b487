"""Training-side utilities: advantages computed from our envs' trajectories."""

from multiturn_envs.rl.gigpo import StepAdvantages, Trajectory, gigpo_advantages

__all__ = ["StepAdvantages", "Trajectory", "gigpo_advantages"]
