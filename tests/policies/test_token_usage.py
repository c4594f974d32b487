"""Every LLM backend reports the tokens of each reply: transformers (its prompt and its ids),
an OpenAI-compatible server (the server's own count; the session's vLLM server, which
test_openai_backend.py starts first), vLLM offline (benchmarks/gpu_vllm_check.py, run by
tests/policies/test_vllm_offline.py, checks each record's tokens against the engine's ids)."""

from __future__ import annotations

from typing import Any

from llm_support import request, require_llm_stack

from multiturn_envs.harness import EvalConfig, run_eval


def test_tokens_of_the_transformers_backend_are_its_prompt_and_its_ids(
    tiny_lm: tuple[Any, Any],
) -> None:
    require_llm_stack()
    from multiturn_envs.policies.transformers_backend import TransformersPolicy

    model, tokenizer = tiny_lm
    policy = TransformersPolicy(model, tokenizer, name="tiny")
    config = EvalConfig("MT/FrozenLake-v0", "tiny", ["4x4"], 2, 3)
    records = run_eval(config, policy, None, progress=False).records
    assert records
    for record in records:
        turns = record["turn_tokens"]
        assert turns is not None
        assert record["prompt_tokens"] == [t["prompt_len"] for t in turns]
        assert record["completion_tokens"] == [len(t["ids"]) for t in turns]


def test_the_tokens_of_a_served_model_are_the_servers_count(vllm_server: str) -> None:
    import httpx

    from multiturn_envs.policies.openai_backend import OpenAIPolicy
    from multiturn_envs.policies.sampling import Sampling

    messages = [{"role": "user", "content": "Which way?"}]
    body = {
        "model": "tiny",
        "messages": [{"role": "system", "content": "Play."}, *messages],
        "max_tokens": 8,
        "seed": 3,
    }
    usage = httpx.post(f"{vllm_server}/v1/chat/completions", json=body, timeout=60).json()["usage"]
    policy = OpenAIPolicy(vllm_server, "tiny", Sampling(max_tokens=8))
    (reply,) = policy.act([request(messages, seed=3)])
    assert reply.usage is not None
    assert reply.usage.prompt_tokens == usage["prompt_tokens"]
    assert reply.token_ids is not None and reply.usage.completion_tokens == len(reply.token_ids)
    generic = OpenAIPolicy(vllm_server, "tiny", Sampling(max_tokens=8), server="generic")
    (plain,) = generic.act([request(messages, seed=3)])
    assert plain.usage is not None and plain.usage.prompt_tokens == usage["prompt_tokens"]
    assert plain.usage.completion_tokens >= 1
