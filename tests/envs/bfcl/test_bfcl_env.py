"""MT/BFCL-v0 on the bundled data: contract, BFCL's criteria, the oracle, snapshots, safety."""

from __future__ import annotations

import copy
import importlib
import json
import pickle
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import multiturn_envs  # noqa: F401  (registers MT/*)
from multiturn_envs.envs.bfcl.bundled import build_data
from multiturn_envs.envs.bfcl.calls import Call, decode
from multiturn_envs.envs.bfcl.data import bundled_data_dir, load_entries
from multiturn_envs.envs.bfcl.env import BFCLEnv
from multiturn_envs.envs.bfcl.multi_turn import END_OF_TURN_REPLY
from multiturn_envs.testing import check_text_env


def agent_backends(env: BFCLEnv) -> dict:
    return pickle.loads(env.get_state()["env"]["episode"]["agent"])


def make(category: str = "multi_turn", **kw) -> BFCLEnv:
    return BFCLEnv(category=category, source="bundled", max_turns=kw.pop("max_turns", 30), **kw)


def play_expert(env: BFCLEnv, task_id: str) -> tuple[bool, list[float]]:
    env.reset(seed=0, options={"task_id": task_id})
    scores: list[float] = []
    while not env.done:
        *_, info = env.step(env.expert_action())
        scores.append(info["step_score"])
    return bool(info["success"]), scores


def test_conformance_multi_turn() -> None:
    check_text_env(
        lambda: make(), task_ids=["bundled_multi_turn_base_0", "bundled_multi_turn_miss_func_1"]
    )


def test_conformance_single_turn() -> None:
    check_text_env(
        lambda: make("single_turn"), task_ids=["bundled_parallel_0", "bundled_irrelevance_0"]
    )


def test_bundled_counts_and_files_match_their_generator(tmp_path: Path) -> None:
    entries = load_entries(
        "bundled", ("multi_turn_base", "multi_turn_miss_func", "multi_turn_miss_param")
    )
    assert len(entries) >= 30
    single = make("single_turn")
    assert len(single.task_ids()) >= 40
    build_data.write(tmp_path)
    for path in sorted(tmp_path.rglob("*.json")):
        committed = bundled_data_dir() / path.relative_to(tmp_path)
        assert committed.read_text() == path.read_text(), f"{committed} is stale"


@pytest.mark.parametrize("category", ["multi_turn", "single_turn"])
def test_ground_truth_replay_passes_every_bundled_entry(category: str) -> None:
    env = make(category)
    for task_id in env.task_ids():
        success, scores = play_expert(env, task_id)
        assert success, task_id
        assert all(s == 1.0 for s in scores), (task_id, scores)


def test_ground_truth_calls_of_bundled_entries_raise_no_domain_error() -> None:
    env = make()
    for task_id in env.task_ids():
        env.reset(seed=0, options={"task_id": task_id})
        while not env.done:
            obs, *_ = env.step(env.expert_action())
            assert "error" not in obs.lower(), (task_id, obs)


def _replay(env: BFCLEnv, task_id: str, turns: list[list[str]]) -> bool:
    env.reset(seed=0, options={"task_id": task_id})
    for calls in turns:
        if env.done:
            break
        if calls:
            env.step("[" + ", ".join(calls) + "]")
        if not env.done:
            *_, _info = env.step(END_OF_TURN_REPLY)
    return bool(env.current_info()["success"]) and env.done


def corrupt(call_text: str) -> str | None:
    """The call with its last argument changed to a wrong value (``None``: no argument)."""
    (call,) = decode(call_text).calls
    values = [*call.args, *call.kwargs.values()]
    if not values:
        return None
    last = values[-1]
    if isinstance(last, bool):
        wrong = not last
    elif isinstance(last, int | float):
        wrong = last + 1
    elif isinstance(last, str):
        wrong = last + "_x"
    else:
        wrong = [*last, last[-1]] if last else ["x"]
    if call.kwargs:
        key = list(call.kwargs)[-1]
        return Call(call.name, call.args, {**call.kwargs, key: wrong}).render()
    return Call(call.name, (*call.args[:-1], wrong)).render()


def test_dropping_or_corrupting_one_ground_truth_call_fails() -> None:
    env = make()
    for task_id in env.task_ids():
        gt = env.entry(task_id).ground_truth
        assert _replay(env, task_id, gt), task_id
        for t, turn in enumerate(gt):
            for c in range(len(turn)):
                dropped = copy.deepcopy(gt)
                del dropped[t][c]
                assert not _replay(env, task_id, dropped), (task_id, t, c, "drop")
                wrong = corrupt(turn[c])
                if wrong is None:
                    continue
                corrupted = copy.deepcopy(gt)
                corrupted[t][c] = wrong
                assert not _replay(env, task_id, corrupted), (task_id, wrong)


def test_every_injected_error_scores_below_one() -> None:
    env = make()
    rng = np.random.default_rng(7)
    for task_id in env.task_ids():
        env.reset(seed=0, options={"task_id": task_id})
        while not env.done:
            error = env.error_action(rng)
            assert env.score_action(error) < 1.0, (task_id, error)
            snapshot = env.get_state()
            _, _, terminated, _, _info = env.step(error)
            assert not terminated and "Error during execution" not in error
            env.set_state(snapshot)
            env.step(env.expert_action())


def test_miss_func_releases_docs_at_the_right_turn() -> None:
    env = make(task_ids=["bundled_multi_turn_miss_func_0"])
    obs, _ = env.reset(seed=0)
    assert '"checkout_book"' not in obs
    env.step(env.expert_action())  # turn 0 calls
    obs, *_ = env.step(env.expert_action())  # end turn 0 -> user turn 1 (empty ground truth)
    obs, *_, info = env.step(env.expert_action())  # end turn 1 without calls
    assert "checkout_book" in obs and "I have updated some more functions" in obs
    assert info["user_turn"] == 2


def test_budget_ends_mid_entry_as_truncated_failure() -> None:
    env = make(max_turns=3)
    env.reset(seed=0, options={"task_id": "bundled_multi_turn_base_0"})
    for _ in range(3):
        _, reward, terminated, truncated, info = env.step(env.expert_action())
    assert truncated and not terminated and not info["success"] and reward == 0.0


def test_failed_turn_check_terminates_with_the_reason() -> None:
    env = make()
    env.reset(seed=0, options={"task_id": "bundled_multi_turn_base_0"})
    obs, reward, terminated, _, info = env.step("Sure, I will do that.")
    assert terminated and reward == 0.0 and not info["success"]
    assert info["turn_error_type"] == "multi_turn:empty_turn_model_response"
    assert "failed at user turn 0" in obs


@pytest.mark.parametrize(
    ("action", "needle"),
    [
        ("[no_such_function(x=1)]", "not one of the functions you were given"),
        ("[get_book(isbn=1, extra=2)]", "LibraryAPI.get_book() got an unexpected keyword argument"),
        ("[get_book('a', 'b', 'c')]", "takes 2 positional arguments but 4 were given"),
        ("[get_book(isbn=get_book(isbn='x'))]", "nested function call"),
        ("[__class__(x=1)]", "double underscores"),
        ("[_load_scenario(scenario={})]", "not one of the functions"),
        ("[search_books(query=open)]", "the name 'open'"),
    ],
)
def test_malformed_calls_come_back_as_clear_errors(action: str, needle: str) -> None:
    env = make()
    env.reset(seed=0, options={"task_id": "bundled_multi_turn_base_0"})
    before = agent_backends(env)
    obs, _, terminated, _, info = env.step(action)
    assert needle in obs, obs
    assert not terminated and info["step_score"] == 0.0
    after = agent_backends(env)
    assert vars(before["LibraryAPI"]) == vars(after["LibraryAPI"])


def test_json_tool_calls_work_like_python_calls() -> None:
    env = make()
    env.reset(seed=0, options={"task_id": "bundled_multi_turn_base_0"})
    py = env.step("[search_books(query='Herbert')]")[0]
    env.reset(seed=0, options={"task_id": "bundled_multi_turn_base_0"})
    js = env.step('{"name": "search_books", "arguments": {"query": "Herbert"}}')[0]
    assert py == js and "Dune" in py


def test_snapshot_restores_every_backend() -> None:
    env = make()
    env.reset(seed=0, options={"task_id": "bundled_multi_turn_base_16"})
    env.step(env.expert_action())
    snap = env.get_state()
    first = [env.step(env.expert_action())[0] for _ in range(3)]
    env.set_state(snap)
    assert [env.step(env.expert_action())[0] for _ in range(3)] == first


def test_episodes_share_nothing() -> None:
    a, b = make(), make()
    a.reset(seed=0, options={"task_id": "bundled_multi_turn_base_0"})
    b.reset(seed=0, options={"task_id": "bundled_multi_turn_base_0"})
    a.step("[checkout_book(member_id='M100', isbn='978-0441')]")
    state_b = agent_backends(b)["LibraryAPI"]
    assert state_b.books["978-0441"]["available"] == 2
    a.reset(seed=0, options={"task_id": "bundled_multi_turn_base_0"})
    assert agent_backends(a)["LibraryAPI"].books["978-0441"]["available"] == 2


def _module_fingerprint() -> str:
    mods = [
        importlib.import_module(f"multiturn_envs.envs.bfcl.bundled.{m}")
        for m in ("library_api", "smart_home_api")
    ]
    return json.dumps([m.DEFAULT_STATE for m in mods], sort_keys=True, default=str)


@settings(max_examples=40)
@given(
    st.text(max_size=200)
    | st.sampled_from(
        [
            "[checkout_book(member_id='M100', isbn='978-0441')]",
            "[set_away_mode(enabled=True)]",
            "[get_book(isbn=['x'])]",
            "[pay_fine(member_id='M300', amount=1.5)]",
            "[]",
        ]
    )
)
def test_any_string_never_raises_nor_leaks(action: str) -> None:
    env = make()
    fingerprint = _module_fingerprint()
    other = make()
    other.reset(seed=0, options={"task_id": "bundled_multi_turn_base_16"})
    other_state = repr(other.get_state())
    env.reset(seed=0, options={"task_id": "bundled_multi_turn_base_16"})
    obs, _reward, _terminated, _truncated, info = env.step(action)
    assert isinstance(obs, str) and obs and 0.0 <= info["step_score"] <= 1.0
    assert _module_fingerprint() == fingerprint
    assert repr(other.get_state()) == other_state


def test_gym_make_and_info_reports_data_version() -> None:
    env = gym.make("MT/BFCL-v0", max_turns=20, category="multi_turn_base", source="bundled")
    _, info = env.reset(seed=3)
    _, _, _, _, info = env.step(env.unwrapped.expert_action())
    assert info["data_version"] == "bundled-1" and info["category"] == "multi_turn_base"
    env.close()


def test_single_turn_schema_feedback_then_answer() -> None:
    env = make("single_turn", max_turns=3)
    env.reset(seed=0, options={"task_id": "bundled_simple_python_0"})
    obs, _, terminated, _, info = env.step("[calculate_triangle_area(base=3)]")
    assert not terminated and info["parse_error"] and "'height' is missing" in obs
    obs, _, terminated, _, info = env.step("[calculate_triangle_area(base=3, height=5.0)]")
    assert terminated and not info["success"] and info["ast_error_type"] == "type_error:simple"
    env.reset(seed=0, options={"task_id": "bundled_simple_python_0"})
    *_, info = env.step("[calculate_triangle_area(base=3, height=5, unit='Units')]")
    assert info["success"]
