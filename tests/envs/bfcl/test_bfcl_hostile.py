"""MT/BFCL-v0 under a hostile agent: every reply answers within the resource contract, nothing of
one episode reaches the next, and argument errors read as BFCL's own.

Each test names the limit of ``docs/security.md`` it checks. Tests on BFCL's real backends
(file system, posting, math) need bfcl-eval and never skip under ``CI=true``.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from multiturn_envs.envs.bfcl.backends import BackendSet, backend_class
from multiturn_envs.envs.bfcl.calls import MAX_VALUE_DEPTH, CallParseError, decode
from multiturn_envs.envs.bfcl.data import load_entries
from multiturn_envs.envs.bfcl.env import BFCL_STEP_LIMIT, BFCLEnv
from multiturn_envs.envs.bfcl.multi_turn import END_OF_TURN_REPLY, result_key
from multiturn_envs.envs.bfcl.state_bounds import StateLimits, state_problem

FAST = 10.0  # seconds: a generous bound for replies that now take milliseconds
FILE_TASK = "multi_turn_base_0"  # GorillaFileSystem + TwitterAPI, cwd /workspace


def real(task_id: str = FILE_TASK, **kw: object) -> BFCLEnv:
    kw.setdefault("max_steps_per_turn", None)
    env = BFCLEnv(category="multi_turn", source="bfcl-eval", max_turns=None, **kw)  # type: ignore[arg-type]
    env.reset(seed=0, options={"task_id": task_id})
    return env


def bundled(**kw: object) -> BFCLEnv:
    env = BFCLEnv(category="multi_turn", source="bundled", max_turns=None, **kw)  # type: ignore[arg-type]
    env.reset(seed=0, options={"task_id": "bundled_multi_turn_base_0"})
    return env


def timed(env: BFCLEnv, action: str) -> tuple[str, dict, float]:
    start = time.perf_counter()
    obs, _, _, _, info = env.step(action)
    return obs, info, time.perf_counter() - start


# ----------------------------------------------------------------------- backend state
@pytest.mark.usefixtures("needs_bfcl_eval")
def test_copying_a_directory_into_itself_is_undone() -> None:
    """Limit: StateLimits (a cycle counts as infinitely deep). ``cp d d`` made the file system a
    cycle; ``find``, the state key and BFCL's check then never finished."""
    env = real()
    obs, _, seconds = timed(env, "[mkdir(dir_name='d'), cp(source='d', destination='d')]")
    assert "the call was undone" in obs and seconds < FAST
    obs, _, seconds = timed(env, "[find(path='.')]")
    assert '"./d"' in obs and "./d/d" not in obs and seconds < FAST
    state = env.get_state()
    assert env.score_action("[ls()]") == 0.0
    env.set_state(state)
    assert env.current_observation() == obs


@pytest.mark.usefixtures("needs_bfcl_eval")
def test_copies_of_copies_stop_before_the_tree_explodes() -> None:
    """Limit: StateLimits.max_nodes (counting shared directories each time they are reached):
    each ``cp`` shares children, so the tree view doubles per copy (here a 2,000-node bound,
    to keep the test short; the default is 20,000)."""
    env = real(state_limits=StateLimits(max_nodes=2_000))
    env.step("[mkdir(dir_name='a'), mkdir(dir_name='b'), cd(folder='a'), touch(file_name='f')]")
    env.step("[cd(folder='..')]")
    undone = 0
    for i in range(30):
        obs, _, seconds = timed(env, f"[cp(source='a', destination='b'), mv(source='b', "
                                     f"destination='c{i}'), mkdir(dir_name='b'), "
                                     f"cp(source='c{i}', destination='a')]")  # fmt: skip
        assert seconds < FAST, i
        undone += "more than 2,000 objects" in obs and "the call was undone" in obs
    assert undone > 0
    obs, _, seconds = timed(env, "[du(human_readable=False), find(path='.')]")
    assert seconds < FAST and "disk_usage" in obs
    key_start = time.perf_counter()
    env.state_key()
    assert time.perf_counter() - key_start < FAST


@pytest.mark.usefixtures("needs_bfcl_eval")
def test_deeply_nested_directories_keep_snapshots_working() -> None:
    """Limit: StateLimits.max_depth (64, two per directory level): 1,500 nested directories made
    get_state/score_action raise RecursionError (pickle and ==)."""
    env = real()
    calls = ", ".join("mkdir(dir_name='n'), cd(folder='n')" for _ in range(20))
    observations = [timed(env, f"[{calls}]") for _ in range(3)]
    assert all(seconds < FAST for _, _, seconds in observations)
    assert "nest more than 64 levels deep; the call was undone" in observations[1][0]
    state = env.get_state()
    assert 0.0 <= env.score_action("[pwd()]") <= 1.0
    env.set_state(state)
    assert env.step(END_OF_TURN_REPLY)[0]  # BFCL's state check compares the trees: it answers


def test_the_state_walk_is_bounded_on_a_cycle() -> None:
    """Limit: the walk itself stops at the first bound (a cycle, an exploding DAG)."""
    loop: dict[str, object] = {}
    loop["self"] = loop
    assert "nest more than 64 levels" in (state_problem(loop, StateLimits()) or "")
    wide: list[object] = []
    for _ in range(60):
        wide = [wide, wide]
    start = time.perf_counter()
    assert "more than 20,000 objects" in (state_problem(wide, StateLimits()) or "")
    assert time.perf_counter() - start < FAST
    assert state_problem({"x": "y" * 20}, StateLimits(max_chars=10)) is not None


@pytest.mark.usefixtures("needs_bfcl_eval")
def test_mutable_defaults_never_carry_one_episode_into_the_next() -> None:
    """Episode isolation: ``TwitterAPI.post_tweet(tags=[], mentions=[])`` stores its default
    lists; a later ``mention`` extended them for every later episode."""
    defaults = backend_class("TwitterAPI").post_tweet.__defaults__
    env = real("multi_turn_base_4")
    posted = env.step("[post_tweet(content='first')]")[0]
    tweet_id = json.loads(posted.split(" -> ", 1)[1])["id"]
    obs = env.step(f"[mention(tweet_id={tweet_id}, mentioned_usernames=['@eve'])]")[0]
    assert "mentioned successfully" in obs
    env.reset(seed=0, options={"task_id": "multi_turn_base_4"})
    obs = env.step("[post_tweet(content='second')]")[0]
    assert json.loads(obs.split(" -> ", 1)[1])["mentions"] == []  # was ['@eve']
    assert backend_class("TwitterAPI").post_tweet.__defaults__ == defaults == ([], [])


@pytest.mark.usefixtures("needs_bfcl_eval")
def test_mpmath_precision_given_as_a_string_is_bounded() -> None:
    """Limit: MathAPI precision <= 1,000 however it is spelled (a string went to mpmath)."""
    entry = next(e for e in load_entries("bfcl-eval", ["multi_turn_base"])
                 if "MathAPI" in e.involved_classes)  # fmt: skip
    env = real(entry.id)
    for precision in ("'100000000'", "'1e9'", "100000000", "1e300", "float('nan')"):
        action = f"[logarithm(value=10, base=2, precision={precision})]"
        try:
            decode(action)
        except CallParseError:
            continue  # float('nan') is not a literal: refused by the parser
        obs, _, seconds = timed(env, action)
        assert seconds < FAST, precision
        assert "must be at most 1000" in obs or '"error"' in obs, obs
    assert "'result': mpf('3.0" in env.step("[logarithm(value=8, base=2, precision='20')]")[0]


# ----------------------------------------------------------------------- fidelity
def test_the_turn_is_force_quit_after_the_21st_reply_as_bfcl_does() -> None:
    """BFCL's harness counts a step after running it and quits when the count exceeds 20."""
    env = bundled()
    for _ in range(BFCL_STEP_LIMIT):
        _, _, terminated, _, _ = env.step("[search_books(query='x')]")
        assert not terminated
    obs, _, terminated, _, info = env.step("[search_books(query='Herbert')]")
    assert terminated and info["turn_error_type"] == "multi_turn:force_quit"
    assert "Dune" in obs and "more than 20 replies" in obs  # the 21st ran, then the quit


@pytest.mark.usefixtures("needs_bfcl_eval")
def test_argument_errors_read_as_bfcl_eval_gives_them() -> None:
    """Result strings for calls that do not fit the function equal BFCL's
    (``execute_multi_turn_func_call`` on the real backends), as the env card promises."""
    from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_utils import (
        execute_multi_turn_func_call,
    )

    entries = load_entries("bfcl-eval", ["multi_turn_base"])[::25]
    compared = 0
    for entry in entries:
        ours = BackendSet(entry.involved_classes, entry.initial_config, entry.long_context)
        model = "i22_" + uuid.uuid4().hex[:8]  # BFCL caches instances per model name
        for turn in entry.ground_truth:
            for call in turn:
                name = call.split("(", 1)[0]
                for text in (call, f"{name}(extra_arg=1)", f"{name}('a', 'b', 'c', 'd', 'e')"):
                    theirs, _ = execute_multi_turn_func_call(
                        [text], entry.initial_config, entry.involved_classes, model, entry.id
                    )
                    mine = [ours.execute(c) for c in decode(text).calls]
                    assert mine == theirs, (entry.id, text)
                    compared += 1
    assert compared > 50


def test_results_are_checked_whole_but_kept_as_digests() -> None:
    """Limit: results past 256 characters are kept as digests (the response check stays exact)."""
    long = "x" * 10_000
    assert result_key(long) == result_key("x" * 10_000) != result_key(long + "y")
    assert len(result_key(long)) < 120 and result_key("short") == "short"


# ----------------------------------------------------------------------- replies
def test_too_many_calls_in_one_reply_run_none() -> None:
    """Limit: max_calls_per_reply (64). A 63 KB reply of short calls used to yield a 297 MB
    observation."""
    env = bundled()
    reply = "[" + ", ".join(["list_members()"] * 5_000) + "]"
    obs, info, seconds = timed(env, reply)
    assert "holds 5000 calls; at most 64" in obs and info["parse_error"] and seconds < FAST
    assert not env.done


def test_observations_are_cut_per_result_and_in_total() -> None:
    """ServerLimits: max_result_chars (shown per result) and max_observation_chars."""
    env = bundled(max_result_chars=300, max_observation_chars=2_000)
    obs = env.step("[" + ", ".join(["list_members()"] * 64) + "]")[0]
    assert len(obs) <= 2_000 and obs.endswith("characters in all]")
    first = obs.splitlines()[0]
    assert len(first) <= 300 + len("list_members() -> ")


def test_values_nested_too_deeply_are_malformed_calls() -> None:
    """Limit: MAX_VALUE_DEPTH (32) for Python and JSON calls; deeper JSON than the parser takes
    is a malformed call, not prose that ends the user turn."""
    deep = "[" * 40 + "]" * 40
    for reply in (
        f"[search_books(query={deep})]",
        '{"name": "search_books", "arguments": {"query": ' + deep + "}}",
        "[" * 5_000 + "]" * 5_000,
    ):
        with pytest.raises(CallParseError, match=r"deep|nested"):
            decode(reply)
    assert MAX_VALUE_DEPTH == 32


def test_an_over_long_reply_is_refused_and_the_turn_goes_on() -> None:
    """Limit: core's max_action_chars (1,000,000): a reply of the turn, nothing parsed or run."""
    env = bundled()
    obs, reward, terminated, _, info = env.step("[list_members()]" + " " * 1_000_000)
    assert obs.startswith("Error: The reply is 1,000,016 characters long")
    assert info["parse_error"] and not terminated and reward == 0.0 and info["user_turn"] == 0
    assert "list_members" in env.step("[list_members()]")[0]


DEGENERATE = ["```", "```json\n", "<TOOLCALL>", "</TOOLCALL>", "[", "(", "{", '"', "\n", " ",
              "f(", "list_members()", ",", "<think>", "a"]  # fmt: skip


@settings(max_examples=30, deadline=None)
@given(piece=st.sampled_from(DEGENERATE), count=st.integers(1, 40_000))
def test_degenerate_replies_answer_within_the_contract(piece: str, count: int) -> None:
    """Limit: reply parsing is linear (fences and tags found with str.find); one token repeated
    tens of thousands of times is answered at once, as a reply of the turn."""
    env = bundled()
    obs, _, seconds = timed(env, piece * count)
    assert seconds < FAST and isinstance(obs, str) and obs
    assert len(obs) <= env.max_observation_chars + 200


# ---------------------------------------------------------- a hostile data folder (issue 29)
def _data_dir(tmp_path: Path, line: str) -> Path:
    root = tmp_path / "bfcl"
    root.mkdir()
    (root / "BFCL_v4_simple_python.json").write_text(line + "\n")
    return root


@pytest.mark.parametrize(
    ("line", "match"),
    [
        ('{"id": "x", "question": ' + "[" * 5000 + "]" * 5000 + "}", "nested"),  # 64 levels
        ('{"question": []}', "not a BFCL entry"),
        ("[1, 2]", "not a JSON object"),
        ("{not json", "not valid JSON"),
    ],
)
def test_bound_a_local_data_folder_is_read_within_bounds(
    tmp_path: Path, line: str, match: str
) -> None:
    from multiturn_envs.errors import UntrustedInputError

    root = _data_dir(tmp_path, line)
    with pytest.raises(UntrustedInputError, match=match) as info:
        load_entries(str(root), ["simple_python"])
    assert "BFCL_v4_simple_python.json: line 1" in str(info.value)


def test_bound_a_local_data_folder_never_reads_through_a_link_out(tmp_path: Path) -> None:
    from multiturn_envs.errors import UntrustedInputError

    root = tmp_path / "bfcl"
    root.mkdir()
    secret = tmp_path / "secret.json"
    secret.write_text('{"id": "s", "question": [], "function": []}\n')
    (root / "BFCL_v4_simple_python.json").symlink_to(secret)
    with pytest.raises(UntrustedInputError, match="outside the folder"):
        load_entries(str(root), ["simple_python"])
    other = tmp_path / "fifo-data"
    other.mkdir()
    os.mkfifo(other / "BFCL_v4_simple_python.json")
    with pytest.raises(UntrustedInputError, match="FIFO"):
        load_entries(str(other), ["simple_python"])
