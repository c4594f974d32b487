"""MT/Terminal-v0: shell tasks in a fresh hardened container, one command per turn."""

from multiturn_envs.envs.terminal.checker import Check
from multiturn_envs.envs.terminal.env import TerminalEnv
from multiturn_envs.envs.terminal.tasks import TerminalTask

__all__ = ["Check", "TerminalEnv", "TerminalTask"]
