"""The rewards registry: names, parameters, and the invariants every reward keeps.

Every built-in reward is checked on real episodes (GuessEnv and FrozenLake, random moves,
garbage included, under random budgets): its per-turn credits sum to its score, the running
tally gives the same credits turn by turn, and the process reward's part stays in [0, 1].
"""

from __future__ import annotations

import gc
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import multiturn_envs  # noqa: F401
from multiturn_envs.rewards import (
    BUILT_IN,
    Episode,
    PerTurnReward,
    Process,
    Reward,
    Turn,
    make_reward,
    process_score,
    reward_class,
    reward_names,
    reward_params,
    step_credit,
)
from multiturn_envs.testing import GuessEnv

DOCS = Path(__file__).resolve().parents[2] / "docs" / "rewards.md"
MOVES = ["Left", "Down", "Right", "Up", "", "jump", "<answer>Right</answer>"]


def _episode(env: gym.Env[str, str], actions: list[str], **reset: Any) -> Episode:
    _, start = env.reset(**reset)
    turns = []
    for action in actions:
        _, reward, terminated, truncated, info = env.step(action)
        turns.append(Turn(float(reward), info, terminated, truncated))
        if terminated or truncated:
            break
    return Episode(start, tuple(turns))


def _lake(moves: list[str], budget: int) -> Episode:
    env = gym.make("MT/FrozenLake-v0", is_slippery=False, disable_env_checker=True)
    try:
        return _episode(
            env, moves, seed=0, options={"task_id": "map:SFH/FHF/FFG", "max_turns": budget}
        )
    finally:
        env.close()


def test_the_built_in_names_and_their_parameters() -> None:
    assert reward_names() == (
        "mean_step_score",
        "outcome",
        "process",
        "shaped",
        "step_credit",
        "success",
    )
    assert {cls.name for cls in BUILT_IN} == set(reward_names())
    assert reward_params("process") == ("weight",)
    assert reward_params("shaped") == ("weight", "outcome_weight", "baseline")
    assert make_reward("process").spec() == {"name": "process", "weight": 0.5}
    assert make_reward({"name": "process", "weight": 1.0}) == Process(weight=1.0)
    process = Process(weight=0.2)
    assert make_reward(process) is process
    assert make_reward(process.spec()) == process  # a spec rebuilds its reward


@pytest.mark.parametrize(
    ("spec", "params", "match"),
    [
        ("best", {}, "reward must be one of"),
        (3, {}, "reward must be one of"),
        ({"weight": 1}, {}, "needs a name"),
        ("process", {"w": 1}, r"takes \['weight'\], not \['w'\]"),
        ("process", {"weight": float("nan")}, "weight must be a finite number >= 0"),
        ("process", {"weight": -1}, "weight must be a finite number >= 0"),
        ("process", {"weight": "0.5"}, "weight must be a finite number"),
        ("process", {"weight": True}, "weight must be a finite number"),
        ("shaped", {"baseline": float("inf")}, "baseline must be a finite number"),
        ("shaped", {"weight": 10**1000}, "weight must be a finite number"),
        (Process(), {"weight": 1}, "takes no params"),
    ],
)
def test_bad_specs_are_one_clear_value_error(spec: Any, params: Any, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        make_reward(spec, **params)


def test_a_huge_hostile_spec_gives_a_short_message() -> None:
    with pytest.raises(ValueError) as caught:
        make_reward({"name": "x" * 100_000, **{f"k{i}": i for i in range(10_000)}})
    assert len(str(caught.value)) < 400


@settings(max_examples=40, deadline=None)
@given(
    moves=st.lists(st.sampled_from(MOVES), max_size=8),
    budget=st.integers(1, 7),
    name=st.sampled_from(sorted(reward_names())),
)
def test_credits_sum_to_the_score_and_the_tally_streams_them(
    moves: list[str], budget: int, name: str
) -> None:
    reward = make_reward(name)
    episode = _lake(moves, budget)
    credits = reward.credits(episode)
    assert len(credits) == len(episode.turns)
    before = reward.score(Episode(episode.start))
    assert math.isclose(sum(credits), reward.score(episode) - before, abs_tol=1e-12)
    tally = reward.tally(episode.start)
    streamed = [tally.add(turn) for turn in episode.turns]
    assert streamed == credits and tally.score == reward.score(episode)
    for n in range(len(episode.turns) + 1):  # a prefix scores as the episode stopped there
        prefix = Episode(episode.start, episode.turns[:n])
        assert math.isclose(sum(credits[:n]), reward.score(prefix) - before, abs_tol=1e-12)


@settings(max_examples=40, deadline=None)
@given(moves=st.lists(st.sampled_from(MOVES), max_size=8), budget=st.integers(1, 7))
def test_the_process_reward_is_the_return_plus_a_weighted_fraction(
    moves: list[str], budget: int
) -> None:
    episode = _lake(moves, budget)
    part = process_score(episode)
    assert 0.0 <= part <= 1.0
    env_return = sum(t.reward for t in episode.turns)
    assert Process(weight=0.5).score(episode) == env_return + 0.5 * part
    for turn in episode.turns:
        credit = step_credit(turn.info)
        assert credit is not None and 0.0 <= credit <= turn.info["step_score"]
        if turn.info["parse_error"] or turn.info["state_value"] == 0.0:
            assert credit == 0.0
    # a solved episode (at least 1) always beats an unsolved one (at most 0.5) at weight 0.5
    assert (Process().score(episode) >= 1.0) == episode.success


def test_process_credits_by_hand() -> None:
    """Unsolved turns earn credit / budget; the solving turn also gets what the smaller N adds."""
    env = GuessEnv(max_turns=4)
    episode = _episode(env, ["guess 7", "guess 12"], options={"task_id": "secret-12"})
    assert [t.info["step_score"] for t in episode.turns] == [0.5, 1.0]
    credits = Process(weight=0.5).credits(episode)
    assert credits[0] == 0.5 * 0.5 / 4  # unsolved: over the budget
    assert credits[1] == pytest.approx((1.0 + 0.5 * 1.5 / 2) - 0.5 * 0.5 / 4)  # solved in 2
    assert Process(weight=0.5).score(episode) == 1.0 + 0.5 * 1.5 / 2


def test_episode_of_lists_and_its_properties() -> None:
    start = {"max_turns": 3, "success": False}
    infos = [{"success": False, "truncation_reason": None}, {"success": True}]
    episode = Episode.of(start, [0.0, 1.0], infos, done=True)
    assert episode.budget == 3 and episode.success and episode.done
    assert episode.turns[-1].terminated and not episode.turns[-1].truncated
    cut = Episode.of(start, [0.0], [{"truncation_reason": "turn_budget"}], done=True)
    assert cut.turns[-1].truncated and not cut.success
    with pytest.raises(ValueError, match="one per turn"):
        Episode.of(start, [0.0], [])


def test_a_user_reward_is_registered_by_defining_it() -> None:
    """The inspect_ai way: defining a named subclass registers it; a taken name is refused."""

    @dataclass(frozen=True)
    class Brevity(PerTurnReward, name="test_brevity"):
        """-cost for every turn: shorter episodes score higher."""

        cost: float = 0.1

        def credit(self, turn: Turn) -> float:
            return -self.cost

    assert "test_brevity" in reward_names() and reward_class("test_brevity") is Brevity
    episode = _episode(GuessEnv(max_turns=3), ["guess 1", "guess 2"], options={"task_id": "x-9"})
    assert make_reward("test_brevity", cost=0.5).score(episode) == -1.0
    with pytest.raises(ValueError, match="is taken by"):

        class Clash(PerTurnReward, name="process"):
            def credit(self, turn: Turn) -> float:
                return 0.0

    with pytest.raises(ValueError, match="lowercase identifier"):

        class Bad(PerTurnReward, name="Not A Name"):
            def credit(self, turn: Turn) -> float:
                return 0.0

    # the class hierarchy is the registry: a reward that no longer exists is no longer listed
    del Brevity
    gc.collect()
    assert "test_brevity" not in reward_names()


def test_every_built_in_reward_has_its_doc_entry() -> None:
    """Adding a reward = the object + its entry in docs/rewards.md: this keeps them together."""
    text = DOCS.read_text(encoding="utf-8")
    headings = set(re.findall(r"^### `([a-z_]+)`", text, flags=re.MULTILINE))
    assert headings == {cls.name for cls in BUILT_IN}
    for cls in BUILT_IN:
        assert issubclass(cls, Reward) and cls.__doc__, f"{cls.__name__} needs a docstring"


def test_the_code_on_the_rewards_page_runs() -> None:
    """docs/rewards.md's examples, as written: the usage block and the add-a-reward block."""
    blocks = re.findall(r"```python\n(.*?)```", DOCS.read_text(encoding="utf-8"), re.S)
    assert len(blocks) == 2
    namespace: dict[str, Any] = {"__name__": "docs_rewards"}
    try:
        exec(compile(blocks[0], "docs/rewards.md", "exec", dont_inherit=True), namespace)
        episode, reward = namespace["episode"], namespace["reward"]
        assert len(episode.turns) == 3 and episode.turns[1].info["parse_error"]
        assert math.isclose(sum(reward.credits(episode)), reward.score(episode))
        assert namespace["credit"] == reward.credits(episode)[-1]
        exec(compile(blocks[1], "docs/rewards.md", "exec", dont_inherit=True), namespace)
        _check_brevity(episode)
    finally:
        namespace["env"].close()
        namespace.clear()
        gc.collect()
    assert "brevity" not in reward_names()


def _check_brevity(episode: Episode) -> None:
    brevity = make_reward("brevity", cost=0.25)
    assert brevity.score(episode) == sum(t.reward for t in episode.turns) - 0.75
    with pytest.raises(ValueError, match="cost must be a finite number >= 0"):
        make_reward("brevity", cost=-1)
