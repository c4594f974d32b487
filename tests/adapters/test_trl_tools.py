"""TRL's idiom, one typed method per env tool: the methods render exactly the env's declared
schemas through transformers' ``get_json_schema`` (what TRL renders), a call is one env turn
(a malformed one too, as in the harness), BFCL's per-task tools go through TRL's ``dict``
form, and the rows' system prompt is the one the harness's tool-calling policies read."""

from __future__ import annotations

import importlib.util
import inspect
from typing import Any

import pytest

import multiturn_envs  # noqa: F401
from multiturn_envs.adapters.trl import (
    ENDED_TOOLS,
    TRLEnvironment,
    environment_factories,
    environment_factory,
    grpo_rows,
    trl_environment_class,
)
from multiturn_envs.envs.deepcoder.env import SUBMIT_TOOL
from multiturn_envs.envs.frozenlake.env import MOVE_TOOL
from multiturn_envs.envs.intercode_sql.env import TOOLS as SQL_TOOLS
from multiturn_envs.envs.terminal.env import TOOLS as TERMINAL_TOOLS
from multiturn_envs.testing import require
from multiturn_envs.tools import Tool


def _public(cls: type) -> set[str]:
    return {
        name
        for name, _ in inspect.getmembers(cls, predicate=inspect.isfunction)
        if not name.startswith("_")
    }


@pytest.mark.parametrize(
    "tools",
    [[MOVE_TOOL], list(SQL_TOOLS), [SUBMIT_TOOL], list(TERMINAL_TOOLS)],
    ids=["frozenlake", "sql", "deepcoder", "terminal"],
)
def test_typed_methods_render_the_env_schemas_exactly(tools: list[Tool]) -> None:
    require(importlib.util.find_spec("transformers") is not None, "the package 'transformers'")
    from transformers.utils import get_json_schema

    cls = trl_environment_class(tools)
    assert _public(cls) == {"reset", "get_reward", *(t.name for t in tools)}
    for tool in tools:
        assert get_json_schema(getattr(cls, tool.name)) == tool.openai()


def test_a_typed_call_is_a_turn_and_a_malformed_one_too() -> None:
    make = environment_factory("MT/FrozenLake-v0", max_turns=3, is_slippery=False)
    env: Any = make()
    assert type(env).__name__ == "TRLEnvironment" and not isinstance(env, TRLEnvironment)
    assert _public(type(env)) == {"reset", "get_reward", "move"}
    env.reset(task_id="4x4", seed=0)
    assert "moved Right" in env.move(direction="Right")
    assert "must be one of" in env.move(direction="Sideways")  # the env's message: a turn
    out = env.move(dir="Up")  # an argument the tool does not take: the env says so
    assert "no argument" in out and env.turns == 3 and env.done
    assert env.move(direction="Up") == ENDED_TOOLS and env.calls == 4 and env.turns == 3
    assert env.messages[1]["content"].startswith("<tool_call>")  # the env holds the calls
    generic = environment_factory("MT/FrozenLake-v0", tools="act")()
    assert isinstance(generic, TRLEnvironment) and "act" in _public(type(generic))


def test_a_typed_call_of_any_depth_is_one_turn() -> None:
    """Bound: arguments nested 5,000 deep (TRL hands the model's decoded JSON to the typed
    method) and a non-text ``act`` action of the same depth answer with the env's "nested too
    deeply" observation: one turn each, no RecursionError."""
    deep: Any = "Up"
    for _ in range(5_000):
        deep = {"a": deep}
    env: Any = environment_factory("MT/FrozenLake-v0", max_turns=3, is_slippery=False)()
    env.reset(task_id="4x4", seed=0)
    assert "nested too deeply" in env.move(direction=deep)
    generic: Any = environment_factory("MT/FrozenLake-v0", max_turns=3, tools="act")()
    generic.reset(task_id="4x4", seed=0)
    generic.act(deep)  # not text: its JSON, cut at the reader's depth; the env answers it
    assert env.turns == 1 and generic.turns == 1


def test_rows_carry_the_tool_system_prompt_the_harness_reads() -> None:
    import gymnasium as gym

    rows = grpo_rows("MT/FrozenLake-v0", ["4x4"], tools="env")
    env = gym.make("MT/FrozenLake-v0").unwrapped
    assert rows[0]["prompt"][0]["content"] == env.tool_system_prompt()
    assert "move tool" in rows[0]["prompt"][0]["content"]
    act_rows = grpo_rows("MT/FrozenLake-v0", ["4x4"])  # the study's recorded layout
    assert "`act` tool" in act_rows[0]["prompt"][0]["content"]


def test_bfcl_tools_depend_on_the_task_so_trl_gets_its_dict_form() -> None:
    kwargs = {"category": "multi_turn_base", "source": "bundled"}
    with pytest.raises(ValueError, match="environment_factories"):
        environment_factory("MT/BFCL-v0", **kwargs)
    from multiturn_envs.envs.bfcl.env import BFCLEnv

    tasks = [str(t) for t in BFCLEnv(**kwargs).task_ids()]
    factories, environment_of = environment_factories("MT/BFCL-v0", tasks, **kwargs)
    assert set(environment_of) == set(tasks) and set(environment_of.values()) == set(factories)
    rows = grpo_rows("MT/BFCL-v0", tasks, tools="env", environments=environment_of, **kwargs)
    assert [r["environment"] for r in rows] == [environment_of[t] for t in tasks]
    task = tasks[0]
    env: Any = factories[environment_of[task]]()
    env.reset(task_id=task, seed=0)
    expert = env.env.unwrapped.expert_action()
    from multiturn_envs.envs.bfcl.calls import decode

    call = decode(expert).calls[0]
    method = getattr(env, call.name.replace(".", "_"))
    result = method(**call.kwargs)
    assert env.turns == 1 and isinstance(result, str) and not env.infos[1]["parse_error"]
