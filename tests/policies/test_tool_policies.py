"""LLM policies with the env's tools: the tool layout (native and Hermes text), the Hermes/Qwen
parser, kept token ids across tool turns, and real models (the tiny model's ChatML template,
TRL's Qwen2.5 template, SmolLM2's) prompted with the tools."""

from __future__ import annotations

import copy
from typing import Any

import gymnasium as gym
import pytest

import multiturn_envs  # noqa: F401
from multiturn_envs.policies.base import TurnRequest
from multiturn_envs.policies.prompting import ChatPrompter, Completion
from multiturn_envs.policies.sampling import Sampling
from multiturn_envs.policies.tool_layout import (
    parse_hermes,
    renders_tools_natively,
    replies_stop,
    tool_conversation,
)
from multiturn_envs.policies.transformers_backend import TransformersPolicy
from multiturn_envs.testing import require_packages
from multiturn_envs.tools import Tool, ToolCall

MOVE = Tool(
    "move",
    "step",
    {
        "type": "object",
        "properties": {"direction": {"type": "string", "enum": ["Left", "Right"]}},
        "required": ["direction"],
    },
)
CALL = ToolCall("move", {"direction": "Left"})
HISTORY = [
    {"role": "user", "content": "start"},
    {"role": "assistant", "content": CALL.text()},
    {"role": "user", "content": "moved"},
    {"role": "assistant", "content": "not a call"},
    {"role": "user", "content": "huh?"},
]


def test_tool_conversation_native_and_hermes() -> None:
    native = tool_conversation(HISTORY, "Play.", [MOVE], native=True)
    assert native[0] == {"role": "system", "content": "Play."}
    assert native[2]["tool_calls"][0]["function"] == {
        "name": "move",
        "arguments": {"direction": "Left"},
    }
    assert native[3] == {"role": "tool", "name": "move", "content": "moved"}
    assert native[4] == {"role": "assistant", "content": "not a call"}
    assert native[5] == {"role": "user", "content": "huh?"}
    text = tool_conversation(HISTORY, "Play.", [MOVE], native=False)
    assert "<tools>" in text[0]["content"] and '"name": "move"' in text[0]["content"]
    assert text[2] == {"role": "assistant", "content": CALL.text()}
    assert text[3]["content"] == "<tool_response>\nmoved\n</tool_response>"
    folded = tool_conversation(HISTORY, "Play.", [MOVE], native=False, fold_system=True)
    assert folded[0]["role"] == "user" and folded[0]["content"].startswith("Play.")


@pytest.mark.parametrize(
    ("completion", "action", "n_calls"),
    [
        ("Let me think.\nI go left.", "Let me think.\nI go left.", None),
        (f"Sure!\n{CALL.text()}\nthat was it", CALL.text(), 1),
        (
            '<tool_call>\n{"name": "move", "arguments": {"direction": "Left"}}\n</tool_call>',
            CALL.text(),
            1,
        ),
        ("<tool_call>{broken}</tool_call>", "<tool_call>{broken}</tool_call>", 0),
        ('<tool_call>{"name": "move", "argu', '<tool_call>{"name": "move", "argu', 0),
        (CALL.text() + CALL.text(), CALL.text() + "\n" + CALL.text(), 2),
    ],
)
def test_parse_hermes(completion: str, action: str, n_calls: int | None) -> None:
    got, calls = parse_hermes(completion)
    assert got == action
    assert (None if calls is None else len(calls)) == n_calls


@pytest.mark.parametrize("depth", [33, 990, 10_000])
def test_a_text_reply_with_a_call_nested_any_depth_is_one_turn(depth: int) -> None:
    """Bound: the reader of model text (vLLM, transformers, SkyRL, verl's fallback) keeps a
    call nested past 32 levels verbatim, with no RecursionError, and the env refuses it with
    its "nested too deeply" observation: one turn."""
    import gymnasium as gym

    nested = '{"a": ' * depth + '"Left"' + "}" * depth
    completion = (
        f'<tool_call>{{"name": "move", "arguments": {{"direction": {nested}}}}}</tool_call>'
    )
    action, calls = parse_hermes(f"I go.\n{completion}")
    assert action == completion and calls == []
    env = gym.make("MT/FrozenLake-v0", max_turns=3).unwrapped
    env.reset(seed=0, options={"task_id": "4x4"})
    observation, _, _, _, info = env.step(action)
    assert info["parse_error"] and env.turn == 1
    assert "nested too deeply" in observation or "characters" in observation


def test_the_one_rule_for_replies_without_a_call() -> None:
    assert not replies_stop(None, "Done.", "stop")  # a text-mode reply is always an action
    assert replies_stop([], "Done.", "stop")  # tool mode, no call: the episode ends
    assert not replies_stop([], "Done.", "action")  # BFCL: a message to the user
    assert not replies_stop([], "<tool_call>{broken", "stop")  # a broken call is a turn


def _tiny_pair(tiny_lm: tuple[Any, Any]) -> tuple[Any, Any]:
    """The tiny tokenizer with its ChatML template, and a copy with TRL's Qwen2.5 template."""
    from multiturn_envs.rl.tiny_agent import tool_chat_template

    _, tokenizer = tiny_lm
    qwen = copy.deepcopy(tokenizer)
    qwen.chat_template = tool_chat_template()
    return tokenizer, qwen


def test_templates_are_detected(tiny_lm: tuple[Any, Any]) -> None:
    require_packages("trl")
    chatml, qwen = _tiny_pair(tiny_lm)
    assert not renders_tools_natively(chatml)
    assert renders_tools_natively(qwen)


@pytest.mark.parametrize("template", ["chatml", "qwen2.5"])
def test_tool_episode_keeps_ids_and_reads_calls(tiny_lm: tuple[Any, Any], template: str) -> None:
    """A FrozenLake episode through the prompter with tools: each prompt extends the last prompt
    plus the generated ids, the tools are in the prompt, and the completions' calls are read."""
    require_packages("trl")
    chatml, qwen = _tiny_pair(tiny_lm)
    tokenizer = chatml if template == "chatml" else qwen
    prompter = ChatPrompter(tokenizer, tools=True)
    assert prompter.native_tools is (template == "qwen2.5")
    env = gym.make("MT/FrozenLake-v0", max_turns=4, is_slippery=False).unwrapped
    env.reset(seed=0, options={"task_id": "4x4"})
    previous: list[int] = []
    written = [
        f"I will go down.\n{ToolCall('move', {'direction': 'Down'}).text()}",
        '<tool_call>\n{"name": "move", "arguments": {"direction": "Sideways"}}\n</tool_call>',
        "I am done.",
    ]
    for turn, text in enumerate(written):
        request = TurnRequest(
            env.message_view(), env, turn, "e", env.system_prompt(), tuple(env.tools())
        )
        prompt = prompter.prompt(request)
        assert prompt.token_ids[: len(previous)] == previous
        assert prompt.continued is (turn > 0)
        rendered = tokenizer.decode(prompt.token_ids)
        assert '"direction"' in rendered and "Sideways" not in rendered.split("user")[0]
        ids = [*tokenizer.encode(text, add_special_tokens=False), tokenizer.eos_token_id]
        reply = prompter.finish(request, prompt, Completion(ids, None, text, "stop"))
        previous = prompt.token_ids + ids
        if turn == 2:
            assert reply.tool_calls == [] and reply.text == "I am done."
            break
        assert reply.text.startswith("<tool_call>") and reply.tool_calls is not None
        _, _, _, _, info = env.step(reply.text)
        assert info["parse_error"] is (turn == 1)  # the enum refuses "Sideways"
    assert "<tool_response>" in tokenizer.decode(previous) or template == "qwen2.5"


def test_smollm2_is_prompted_with_the_tools_and_follows_the_rule(
    smollm2: tuple[Any, Any, str], tmp_path: Any
) -> None:
    """SmolLM2's template ignores tools: they go in the Hermes wording; whatever it answers,
    the harness applies the one rule (a call is a turn, no call ends the episode)."""
    from multiturn_envs.harness import EvalConfig, read_run, run_eval

    model, tokenizer, name = smollm2
    policy = TransformersPolicy(
        model, tokenizer, Sampling(temperature=0.7, max_tokens=40), name=name, tools=True
    )
    assert not policy.prompter.native_tools
    env = gym.make("MT/FrozenLake-v0", max_turns=2).unwrapped
    env.reset(seed=0, options={"task_id": "4x4"})
    request = TurnRequest(env.message_view(), env, 0, "", env.system_prompt(), tuple(env.tools()))
    shown = policy.prompter.tokenizer.decode(policy.prompter.prompt(request).token_ids)
    assert "<tools>" in shown and '"name": "move"' in shown and "<tool_call>" in shown
    config = EvalConfig(
        "MT/FrozenLake-v0", policy.name, tasks=["4x4"], samples=2, max_turns=2, seed=0
    )
    run_eval(config, policy, str(tmp_path / "run.jsonl"), progress=False)
    for record in read_run(tmp_path / "run.jsonl").records:
        tokens = record["turn_tokens"] or []
        assert all(a.startswith("<tool_call>") for a in record["actions"])
        if record["agent_stopped"]:  # it answered without a call: no turn was spent on it
            assert record["turns"] < 2 and not record["terminated"]
        assert len(tokens) == record["turns"]
