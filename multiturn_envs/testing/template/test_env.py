"""The template env's tests: what every env's tests start with (checklist step 6).

Copy it beside your env as ``tests/envs/<your_env>/test_env.py``. Two checks cover the env
contract; add your env's own dynamics and oracle below them.
"""

from __future__ import annotations

from multiturn_envs.testing import check_text_env, text_env_machine
from multiturn_envs.testing.template.env import LightsEnv, distance


def test_the_env_conforms() -> None:
    """Spaces, determinism, the info keys, the oracle, snapshots, the budget, hostile replies."""
    check_text_env(lambda: LightsEnv(max_turns=5))


TestLightsDynamics = text_env_machine(lambda: LightsEnv(max_turns=5), max_examples=25).TestCase
"""Many action sequences, hypothesis-chosen: exact budget, scores in [0, 1], snapshots that
replay, close twice."""


def test_the_expert_solves_every_task_in_the_fewest_turns() -> None:
    env = LightsEnv(max_turns=None)
    for task_id in env.task_ids():
        env.reset(seed=0, options={"task_id": task_id})
        shortest = distance(env.current_info()["state_key"])
        info: dict[str, object] = {}
        while not env.done:
            *_, info = env.step(env.expert_action())
        assert info["success"] and info["turn"] == shortest
