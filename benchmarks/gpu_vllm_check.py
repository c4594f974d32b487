"""GPU check of the vLLM path: harness generation throughput against raw vLLM, same prompts.

1. Runs the harness (``run_eval``) on MT/FrozenLake-v0 with a :class:`VLLMPolicy` and records
   every batch of token-id prompts and seeds the policy sent to the engine.
2. Replays exactly those batches with bare ``llm.generate`` calls (same sampling parameters).
3. Prints generated tokens per second of both and the harness overhead
   ``harness_wall / raw_wall - 1`` (goal: < 10 %). The anchor (raw vLLM) is measured in the same
   run, on the same engine, after the harness run (so the prefix cache is equally warm for both
   phases' later turns; the replay sees a warm cache for the first turns, which favours raw).
4. Checks log-prob equality: scores one episode's trajectory with a separate scoring engine
   (prefix caching off) and prints the largest |generation - scoring| log-prob difference.

Usage (on the GPU machine; needs vllm, transformers, tokenizers):
    python benchmarks/gpu_vllm_check.py                      # tiny random model built here
    python benchmarks/gpu_vllm_check.py --model /path/to/hf_model --dtype bfloat16
It also runs on vLLM's CPU build with small settings (``--tasks 2 --samples 2 --turns 2``).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Sequence
from typing import Any

from multiturn_envs.policies.prompting import Completion
from multiturn_envs.policies.sampling import Sampling
from multiturn_envs.policies.token_sequences import trajectory_sequences


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="HF model folder (default: tiny model)")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--tasks", type=int, default=16)
    parser.add_argument("--samples", type=int, default=16)
    parser.add_argument("--turns", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--in-flight", type=int, default=256)
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.45)
    args = parser.parse_args()

    import gymnasium as gym

    import multiturn_envs  # noqa: F401 (registers MT/*)
    from multiturn_envs.harness import EvalConfig, run_eval
    from multiturn_envs.policies import load_scoring_model
    from multiturn_envs.policies.vllm_backend import VLLMPolicy, import_vllm, sampling_params

    vllm = import_vllm()
    workdir = tempfile.mkdtemp(prefix="gpu_vllm_check_")
    model = args.model
    if model is None:
        from multiturn_envs.rl.tiny_lm import build_tiny_chat_model

        # the junk sampler of the tests (tests/conftest.py ``tiny_dir``): with the attention
        # biases at 1.0 its replies vary in length and content, which the throughput and
        # log-prob checks need; the fixed init's random model repeats one token
        model = str(build_tiny_chat_model(f"{workdir}/tiny", qkv_bias=1.0))
    engine = {
        "dtype": args.dtype,
        "max_model_len": 4096,
        "seed": 0,
        "gpu_memory_utilization": args.gpu_memory_utilization,
    }
    sampling = Sampling(temperature=1.0, max_tokens=args.max_tokens)

    calls: list[tuple[list[list[int]], list[int], int]] = []

    class Recording(VLLMPolicy):
        def generate_ids(
            self, prompts: Sequence[Sequence[int]], seeds: Sequence[int], n: int = 1
        ) -> list[list[Completion]]:
            calls.append(([list(p) for p in prompts], list(seeds), n))
            return super().generate_ids(prompts, seeds, n)

    t0 = time.perf_counter()
    policy = Recording(model, sampling, enable_prefix_caching=True, **engine)
    print(f"engine init: {time.perf_counter() - t0:.1f} s")
    tasks = list(gym.make("MT/FrozenLake-v0").unwrapped.task_ids())[: args.tasks]
    config = EvalConfig(
        env_id="MT/FrozenLake-v0",
        policy="vllm",
        tasks=tasks,
        samples=args.samples,
        max_turns=args.turns,
        seed=0,
    )
    policy.generate_ids([[1, 2, 3]], [0], 1)  # warm-up, not counted
    calls.clear()
    t0 = time.perf_counter()
    summary = run_eval(
        config, policy, f"{workdir}/records.jsonl", in_flight=args.in_flight, progress=False
    )
    harness_s = time.perf_counter() - t0

    llm = policy.llm
    raw_s, tokens = 0.0, 0
    for prompts, seeds, n in calls:
        batch = [vllm.TokensPrompt(prompt_token_ids=p) for p in prompts]
        params = [sampling_params(vllm, sampling, n, s) for s in seeds]
        t0 = time.perf_counter()
        outs = llm.generate(batch, params, use_tqdm=False)
        raw_s += time.perf_counter() - t0
        tokens += sum(len(o.token_ids) for r in outs for o in r.outputs)
    print(f"episodes: {summary.written}, policy calls: {len(calls)}, generated tokens: {tokens}")
    print(f"harness: {harness_s:.2f} s = {tokens / harness_s:.0f} tok/s")
    print(f"raw vLLM, same prompts: {raw_s:.2f} s = {tokens / raw_s:.0f} tok/s")
    print(f"harness overhead: {harness_s / raw_s - 1:+.1%} (goal < +10%)")

    # log-prob equality: generation (prefix cache on) vs a separate scoring engine (cache off)
    from multiturn_envs.policies.base import TurnRequest

    env = gym.make("MT/FrozenLake-v0", max_turns=3).unwrapped
    env.reset(seed=0)
    replies: list[Any] = []
    for turn in range(3):
        if env.done:
            break
        req = TurnRequest(messages=env.messages(), env=env, seed=turn, episode_id="check")
        (reply,) = policy.act([req])
        replies.append(reply)
        env.step(reply.text)
    # the env's tools through the same engine: rendered by the template (or the Hermes
    # wording for a template without tools), each reply read with the Hermes parser
    tooled = VLLMPolicy(llm, sampling, tools=True)
    env.reset(seed=1)
    req = TurnRequest(
        env.messages(), env, 0, "tools", env.system_prompt(), tuple(env.tools()),
        env.tool_system_prompt(),
    )  # fmt: skip
    shown = tooled.prompter.tokenizer.decode(tooled.prompter.prompt(req).token_ids)
    (reply,) = tooled.act([req])
    rendering = "native" if tooled.prompter.native_tools else "hermes"
    schema_shown = '"name": "move"' in shown
    print(
        f"tools: {rendering} rendering, schema shown: {schema_shown}, "
        f"calls read: {reply.tool_calls is not None}"
    )
    del policy, tooled, llm
    # the scorer through its spec, as `multiturn-envs nll --scoring-model vllm:...` builds it
    spec = f"vllm:{model},dtype={args.dtype},max_model_len=4096"
    spec += f",gpu_memory_utilization={args.gpu_memory_utilization},enforce_eager=true"
    scoring = load_scoring_model(spec)
    print(f"scoring model: {scoring.engine}/{scoring.dtype}")
    scored = scoring.scorer.score(trajectory_sequences(replies))[0]
    delta = max(
        abs(a - b) for span, r in zip(scored, replies) for a, b in zip(span, r.logprobs or [])
    )
    print(f"log-prob equality, generation vs scoring engine: max |delta| = {delta:.2e}")


if __name__ == "__main__":  # the engine core runs in a spawned process
    main()
