"""EpisodeLog and the one vocabulary of ends (issue 33), on real envs."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import multiturn_envs  # noqa: F401
from multiturn_envs.episode import ENDS, End, EpisodeLog, env_end, make_env
from multiturn_envs.rewards import make_reward, reward_names
from multiturn_envs.testing import GuessEnv

MOVES = st.lists(st.sampled_from(["guess 7", "guess 3", "guess 12", "guess 99", "", "x"]))


def _play(log: EpisodeLog, env: Any, moves: list[str]) -> None:
    _, info = env.reset(seed=0, options={"task_id": "secret-12"})
    log.begin(info, seed=0)
    for move in moves:
        _, reward, terminated, truncated, info = env.step(move)
        log.add(reward, terminated, truncated, info)
        if terminated or truncated:
            return


@given(moves=MOVES, reward=st.sampled_from(sorted(reward_names())), budget=st.integers(1, 6))
def test_the_log_streams_what_the_reward_computes_from_the_episode(
    moves: list[str], reward: str, budget: int
) -> None:
    log = EpisodeLog(make_reward(reward))
    _play(log, GuessEnv(max_turns=budget), moves)
    assert log.score == log.reward.score(log.episode)
    assert log.credits == log.reward.credits(log.episode)
    assert len(log.turns) <= budget and len(log.step_scores) == len(log.turns)
    assert all(s is None or 0.0 <= s <= 1.0 for s in log.step_scores)
    if log.first_success is not None:
        assert log.turns[log.first_success - 1].info["success"]
        assert not any(t.info["success"] for t in log.turns[: log.first_success - 1])
    summary = log.summary()
    assert json.loads(json.dumps(summary)) == summary  # JSON as it is
    assert summary["turns"] == len(log.turns) and summary["end"] == (log.end and log.end.name)


def test_the_env_ends_an_episode_in_one_word() -> None:
    solved, spent = EpisodeLog(), EpisodeLog()
    _play(solved, GuessEnv(max_turns=4), ["guess 7", "guess 12"])
    _play(spent, GuessEnv(max_turns=2), ["guess 7", "guess 3"])
    assert solved.end == ENDS["success"] and solved.first_success == 2 and solved.done
    assert spent.end == ENDS["turn_budget"] and spent.truncated and not spent.success
    lake = EpisodeLog()
    env = make_env("MT/FrozenLake-v0", {"is_slippery": False})
    _, info = env.reset(options={"task_id": "map:SH/FG"})
    lake.begin(info)
    lake.add(*env.step("Right")[1:])  # into the hole
    assert lake.end == ENDS["terminal"] and not lake.truncated
    env.close()


def test_the_agent_or_the_framework_end_an_episode_the_env_did_not() -> None:
    log = EpisodeLog()
    _play(log, GuessEnv(max_turns=4), ["guess 7"])
    log.stop("agent_stopped")
    assert log.end == ENDS["agent_stopped"] and not log.done and log.ended
    log.stop("turn_cap")  # one end per episode: the first
    assert log.end == ENDS["agent_stopped"]
    over = EpisodeLog()
    _play(over, GuessEnv(max_turns=1), ["guess 1"])
    over.stop("response_length")
    assert over.end == ENDS["turn_budget"]  # the env had ended it
    with pytest.raises(ValueError, match="an episode's end is one of"):
        log.stop("tired")


def test_a_new_reason_to_end_is_one_entry() -> None:
    """A new reason is an entry, read wherever the name comes (issue 32's ``token_limit`` is
    one; ``End`` builds any other)."""
    names = list(ENDS)
    assert len(names) == len(set(names)) and all(ENDS[n].name == n for n in names)
    assert all(e.by in ("env", "agent", "framework") and e.note for e in ENDS.values())
    other = End("cost_limit", "framework", True, "the cost limit is reached")
    assert env_end(False, True, {"truncation_reason": "turn_budget"}) == ENDS["turn_budget"]
    assert env_end(False, True, {"truncation_reason": "unknown"}) == ENDS["turn_budget"]
    assert env_end(True, False, {"success": True}) == ENDS["success"]
    assert env_end(False, False, {}) is None
    assert other.truncated and other.name not in ENDS
    limit = ENDS["token_limit"]
    assert limit.by == "framework" and limit.truncated
    assert env_end(False, True, {"truncation_reason": "token_limit"}) == limit
    log = EpisodeLog()
    log.begin({"task_id": "t"})
    log.stop("token_limit")
    assert log.end == limit and log.truncated and log.summary()["end"] == "token_limit"
