"""The verl adapter at verl's interface: our agent loop, instantiated by verl's own registry
path, returns an ``AgentLoopOutput`` that validates and converts with verl's ``as_dict``.

The LLM server is the one part that is not verl's: verl's server manager needs Ray and a vLLM
or SGLang replica. :class:`TinyServer` answers the same ``generate`` call with a real (tiny)
transformers model. Skips without verl locally; fails under ``CI=true``.
"""

from __future__ import annotations

import asyncio
import itertools
import os
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest

from multiturn_envs.adapters.verl import EpisodeTokens, run_episode
from multiturn_envs.testing import GuessEnv, require_packages

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def _require_verl() -> None:
    require_packages("verl", "torch", "transformers")
    import torch

    torch.set_num_threads(1)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any]:
    _require_verl()
    from multiturn_envs.rl.tiny_lm import build_tiny_chat_model, load_tiny_chat_model

    return load_tiny_chat_model(build_tiny_chat_model(tmp_path_factory.mktemp("tiny")))


class TinyServer:
    """verl's ``server_manager.generate`` contract, answered by a real tiny model."""

    def __init__(self, model: Any, tokenizer: Any, max_tokens: int = 12) -> None:
        from multiturn_envs.policies.sampling import Sampling
        from multiturn_envs.policies.transformers_backend import TransformersPolicy

        self.policy = TransformersPolicy(model, tokenizer, Sampling(max_tokens=max_tokens))
        self.calls: list[dict[str, Any]] = []

    async def generate(
        self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any], **_: Any
    ) -> Any:
        from verl.workers.rollout.replica import TokenOutput

        self.calls.append({"request_id": request_id, "prompt_ids": list(prompt_ids)})
        seed = int(sampling_params.get("seed", 0))
        out = self.policy.generate([prompt_ids], [seed])[0]
        return TokenOutput(token_ids=out.token_ids, log_probs=out.logprobs, stop_reason="completed")


def _gen(server: TinyServer) -> Any:
    async def generate(prompt_ids: list[int], seed: int) -> tuple[list[int], Any]:
        out = await server.generate("r", prompt_ids=prompt_ids, sampling_params={"seed": seed})
        return list(out.token_ids), out.log_probs

    return generate


def _check_tokens(tokens: EpisodeTokens, server: TinyServer, tokenizer: Any) -> None:
    n = len(tokens.response_ids)
    assert len(tokens.response_mask) == n
    assert tokens.response_logprobs is not None and len(tokens.response_logprobs) == n
    # Each generate call saw exactly prompt + response so far: one growing token sequence.
    full = tokens.prompt_ids + tokens.response_ids
    for call in server.calls:
        assert full[: len(call["prompt_ids"])] == call["prompt_ids"]
    assert server.calls[0]["prompt_ids"] == tokens.prompt_ids
    # Masked-in spans are the generated ids; masked-out spans are env text, not model output.
    generated = sum(tokens.response_mask)
    assert 0 < generated < n or tokens.extra_fields["turns"] == 1


def test_run_episode_tokens_masks_and_env_reward(tiny: tuple[Any, Any]) -> None:
    model, tokenizer = tiny
    server = TinyServer(model, tokenizer)
    env = GuessEnv(max_turns=3)
    tokens = asyncio.run(run_episode(env, tokenizer, _gen(server), task_id="secret-7", seed=3))
    assert tokens.extra_fields["turns"] == 3  # junk replies never succeed: the budget ends it
    assert tokens.extra_fields["stop_reason"] == "budget"
    assert len(server.calls) == 3
    assert tokens.num_turns == 1 + 3 + 2
    _check_tokens(tokens, server, tokenizer)
    # The env's observations sit in the masked-out spans, verbatim.
    env_text = tokenizer.decode(
        [t for t, m in zip(tokens.response_ids, tokens.response_mask) if m == 0]
    )
    assert "I need 'guess N'" in env_text or "too" in env_text
    assert tokens.reward_score == 0.0 and tokens.extra_fields["success"] is False


def test_verl_caps_cut_the_episode(tiny: tuple[Any, Any]) -> None:
    model, tokenizer = tiny
    server = TinyServer(model, tokenizer)
    capped = asyncio.run(
        run_episode(
            GuessEnv(max_turns=6),
            tokenizer,
            _gen(server),
            task_id="secret-1",
            seed=0,
            max_assistant_turns=2,
        )
    )
    assert capped.extra_fields["turns"] == 2
    assert capped.extra_fields["stop_reason"] == "max_assistant_turns"
    short = asyncio.run(
        run_episode(
            GuessEnv(max_turns=6),
            tokenizer,
            _gen(TinyServer(model, tokenizer)),
            task_id="secret-1",
            seed=0,
            response_length=20,
        )
    )
    assert len(short.response_ids) <= 20
    assert short.extra_fields["stop_reason"] in {"response_length", "budget"}
    row_budget = asyncio.run(
        run_episode(GuessEnv(max_turns=6), tokenizer, _gen(server), task_id="secret-1", max_turns=1)
    )
    assert row_budget.extra_fields["turns"] == 1 and row_budget.extra_fields["max_turns"] == 1


def test_a_row_names_its_budget_mode_and_error_injection(tiny: tuple[Any, Any]) -> None:
    """verl reads a row as every edge does (issue 33): an announced budget shows in the env's
    observations, an injected error in the first prompt, and the row's own reward scores."""
    from multiturn_envs.episode import EpisodeStart

    model, tokenizer = tiny
    server = TinyServer(model, tokenizer)
    start = EpisodeStart.from_row(
        {"task_id": "secret-9", "seed": 2, "max_turns": 2, "budget_mode": "announced",
         "error_after": 1, "reward": {"name": "shaped", "weight": 1.0}}
    )  # fmt: skip
    tokens = asyncio.run(run_episode(GuessEnv(max_turns=6), tokenizer, _gen(server), start=start))
    env_text = tokenizer.decode(
        [t for t, m in zip(tokens.response_ids, tokens.response_mask) if m == 0]
    )
    assert "[Turns left: 1 of 2]" in env_text
    assert "guess" in tokenizer.decode(tokens.prompt_ids)  # the injected turns, in the prompt
    assert tokens.extra_fields["max_turns"] == 2 and tokens.extra_fields["turns"] == 2
    assert tokens.reward_score == pytest.approx(sum(tokens.extra_fields["step_scores"]))
    with pytest.raises(ValueError, match="not both"):
        asyncio.run(run_episode(GuessEnv(), tokenizer, _gen(server), start=start, seed=1))


def test_agent_loop_registered_and_output_validates_against_verl(
    tiny: tuple[Any, Any], tmp_path: Path
) -> None:
    import hydra
    import torch
    from omegaconf import OmegaConf
    from verl.experimental.agent_loop.agent_loop import (
        AgentLoopOutput,
        DictConfigWrap,
        _agent_loop_registry,
    )

    from multiturn_envs.adapters.verl import MTEnvAgentLoop

    model, tokenizer = tiny
    assert _agent_loop_registry["mt_env"]["_target_"].endswith("verl.MTEnvAgentLoop")
    config = OmegaConf.create(
        {
            "actor_rollout_ref": {
                "rollout": {
                    "prompt_length": 2048,
                    "response_length": 8192,
                    "multi_turn": {"max_assistant_turns": 4, "max_user_turns": None},
                }
            },
            "data": {"apply_chat_template_kwargs": {}},
        }
    )
    server = TinyServer(model, tokenizer)
    loop = hydra.utils.instantiate(  # how verl's AgentLoopWorker builds an agent loop
        config=_agent_loop_registry["mt_env"],
        trainer_config=DictConfigWrap(config=config),
        server_manager=server,
        tokenizer=tokenizer,
        processor=None,
        dataset_cls=None,
        data_config=DictConfigWrap(config.data),
    )
    assert isinstance(loop, MTEnvAgentLoop)
    row = {
        "agent_name": "mt_env",
        "extra_info": {
            "env_id": "MT/FrozenLake-v0",
            "env_kwargs": {"max_turns": 6, "is_slippery": False},
            "task_id": "4x4",
            "seed": 5,
        },
    }
    output = asyncio.run(loop.run({"temperature": 1.0}, **row))
    assert isinstance(output, AgentLoopOutput)
    AgentLoopOutput.model_validate(output.model_dump())  # verl's own schema
    turns = output.extra_fields["turns"]
    assert 1 <= turns <= 4  # verl's max_assistant_turns (4) < the env's budget (6)
    if output.extra_fields["stop_reason"] == "max_assistant_turns":
        assert turns == 4
    else:  # a junk reply parsed as a move into a hole (terminal) or onto the goal
        assert output.extra_fields["stop_reason"] in {"terminal", "success"}
    assert output.num_turns == 1 + turns + (turns - 1)
    assert len({c["request_id"] for c in server.calls}) == 1  # one sticky session
    data = output.as_dict()
    assert data["prompts"].dtype == torch.int64
    assert data["responses"].shape == data["response_mask"].shape
    assert data["rollout_log_probs"].shape == data["responses"].shape
    assert data["rm_scores"][-1].item() == output.reward_score
    with pytest.raises(ValueError, match="env_id"):
        asyncio.run(loop.run({}, extra_info={}))


def test_hostile_replies_never_break_the_episode(tiny: tuple[Any, Any]) -> None:
    _, tokenizer = tiny
    replies = iter(["\x00\xff", "🤖" * 50, "", "```\n```", "guess 99"])

    async def junk(prompt_ids: list[int], seed: int) -> tuple[list[int], Any]:
        ids = [*tokenizer.encode(next(replies), add_special_tokens=False), tokenizer.eos_token_id]
        return ids, None

    env = gym.wrappers.PassiveEnvChecker(GuessEnv(max_turns=5))
    tokens = asyncio.run(run_episode(env, tokenizer, junk, task_id="secret-2", seed=0))
    assert tokens.extra_fields["turns"] == 5 and tokens.response_logprobs is None
    assert len(tokens.response_ids) == len(tokens.response_mask)


# ---------------------------------------------------------------------- per-step credit, tools
def _worker(tokenizer: Any, prompt_length: int = 2048, response_length: int = 4096) -> Any:
    """verl's ``AgentLoopWorker`` with only what its post-processing reads (no Ray, no LLM
    server): the padding and batching of agent loop outputs into a ``DataProto``."""
    from types import SimpleNamespace

    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker

    worker = object.__new__(AgentLoopWorker)
    worker.rollout_config = SimpleNamespace(
        prompt_length=prompt_length, response_length=response_length
    )
    worker.tokenizer = tokenizer
    worker.processor = None
    worker.reward_loop_worker_handles = None
    worker.distillation_enabled = False
    worker.mm_processor_kwargs = {}
    return worker


def test_turn_scores_are_the_reward_credits_and_reach_verls_batch(tiny: tuple[Any, Any]) -> None:
    """``extra_fields["turn_scores"]`` (what verl's tool agent loop fills) are the per-turn
    credits of the row's registered reward, summing to ``reward_score``; verl's own worker
    post-processing carries them into the batch as ``non_tensor_batch["turn_scores"]``."""
    from multiturn_envs.adapters.verl import verl_output
    from multiturn_envs.rewards import Episode, Turn, make_reward

    _, tokenizer = tiny
    env = gym.make("MT/FrozenLake-v0", max_turns=4, is_slippery=False)
    moves = iter(["Down", "Right", "Down", "Right"])

    async def scripted(prompt_ids: list[int], seed: int) -> tuple[list[int], Any]:
        ids = [*tokenizer.encode(next(moves), add_special_tokens=False), tokenizer.eos_token_id]
        return ids, [0.0] * len(ids)

    tokens = asyncio.run(
        run_episode(env, tokenizer, scripted, task_id="4x4", seed=0, reward="process")
    )
    credits = tokens.extra_fields["turn_scores"]
    assert len(credits) == tokens.extra_fields["turns"] == len(tokens.extra_fields["tool_rewards"])
    assert sum(credits) == pytest.approx(tokens.reward_score)
    # the same credits as the registry gives for the same episode played in process
    twin = gym.make("MT/FrozenLake-v0", max_turns=4, is_slippery=False)
    _, start = twin.reset(seed=0, options={"task_id": "4x4"})
    turns = []
    for move in ["Down", "Right", "Down", "Right"][: tokens.extra_fields["turns"]]:
        _, r, term, trunc, info = twin.step(move)
        turns.append(Turn(float(r), info, term, trunc))
    assert make_reward("process").credits(Episode(start, tuple(turns))) == pytest.approx(credits)
    output = verl_output(tokens)
    worker = _worker(tokenizer)
    internal = asyncio.run(worker._agent_loop_postprocess(output, False, raw_prompt=[]))
    batch = worker._postprocess([internal])
    assert list(batch.non_tensor_batch["turn_scores"][0]) == pytest.approx(credits)
    assert batch.batch["rm_scores"].sum().item() == pytest.approx(tokens.reward_score)


def test_tool_calls_are_read_by_verls_own_parser(tiny: tuple[Any, Any]) -> None:
    """With ``tools``, the env's tools are in the prompt and each response goes through verl's
    Hermes ``ToolParser``: a call is the turn, a malformed one a turn the env explains, and a
    response without a call ends the episode (stop_reason ``no_call``)."""
    from verl.experimental.agent_loop.tool_parser import ToolParser

    from multiturn_envs.adapters.verl import verl_tool_parser
    from multiturn_envs.tools import ToolCall

    _, tokenizer = tiny
    replies = iter(
        [
            ToolCall("move", {"direction": "Down"}).text(),
            '<tool_call>\n{"name": "move", "arguments": {"direction": "Sideways"}}\n</tool_call>',
            '<tool_call>{"name": "move", "arguments": ',  # cut off: a malformed call
            "I am done here.",
        ]
    )
    prompts: list[list[int]] = []

    async def scripted(prompt_ids: list[int], seed: int) -> tuple[list[int], Any]:
        prompts.append(list(prompt_ids))
        text = next(replies)
        return [*tokenizer.encode(text, add_special_tokens=False), tokenizer.eos_token_id], None

    env = gym.make("MT/FrozenLake-v0", max_turns=6, is_slippery=False)
    parser = verl_tool_parser(ToolParser.get_tool_parser("hermes", tokenizer))
    tokens = asyncio.run(
        run_episode(env, tokenizer, scripted, task_id="4x4", seed=0, tools=True, parse_calls=parser)
    )
    assert tokens.extra_fields["stop_reason"] == "no_call" and tokens.extra_fields["turns"] == 3
    assert '"name": "move"' in tokenizer.decode(prompts[0])  # the tool's schema was shown
    history = env.unwrapped.messages()
    assert history[1]["content"] == ToolCall("move", {"direction": "Down"}).text()
    assert "must be one of" in history[4]["content"]
    assert "not closed" in history[6]["content"]


class SlowIOEnv(GuessEnv):
    """GuessEnv whose steps wait 0.6 s on "I/O" (a stand-in for a container run)."""

    blocking_io = True

    def _step(self, action: str) -> Any:
        import time

        time.sleep(0.6)
        return super()._step(action)


@pytest.mark.parametrize("blocking_io", [True, False])
def test_a_slow_env_step_does_not_stall_the_event_loop(
    tiny: tuple[Any, Any], blocking_io: bool
) -> None:
    """The agent loop steps envs that wait on I/O in a worker thread: other coroutines on the
    loop (verl's other agent loops) keep running during the step. Marked otherwise, the same
    env blocks them, which is what this guards against."""
    _, tokenizer = tiny

    async def junk(prompt_ids: list[int], seed: int) -> tuple[list[int], Any]:
        return [
            *tokenizer.encode("guess 3", add_special_tokens=False),
            tokenizer.eos_token_id,
        ], None

    env = SlowIOEnv(max_turns=2)
    env.blocking_io = blocking_io
    ticks: list[float] = []

    async def main() -> None:
        import time

        async def heartbeat() -> None:
            while True:
                ticks.append(time.monotonic())
                await asyncio.sleep(0.02)

        beat = asyncio.create_task(heartbeat())
        await run_episode(env, tokenizer, junk, task_id="secret-9", seed=0)
        beat.cancel()

    asyncio.run(main())
    if blocking_io:  # the loop ticked all along while each 0.6 s step ran elsewhere
        assert len(ticks) >= 10
        assert max(b - a for a, b in itertools.pairwise(ticks)) < 0.45  # generous
    else:
        assert len(ticks) <= 1  # inline: the steps held the loop the whole episode
