"""GPU check of the vLLM path (and its CPU stand-in): harness against raw vLLM on the same prompts.

1. **Throughput.** Runs the harness (``run_eval``) on MT/FrozenLake-v0 with a
   :class:`VLLMPolicy` and records every batch of token-id prompts and seeds the policy sent to
   the engine; then replays exactly those batches with bare ``llm.generate`` calls (same
   sampling parameters, same seeds: the same tokens come back). Harness and raw alternate
   ``--repeats`` times on one engine in ABBA order, the prefix cache emptied before each
   phase; the figure is ``harness_s / raw_s`` per repeat, printed as its median and spread
   (goal: < 1.10 once the engine dominates).
2. **Where the difference goes.** Each harness run is split into the engine's ``generate``
   calls, the policy's own work around them (prompts from kept ids, replies) and the harness's
   (requests, env steps, records); ``harness_s / engine_s`` is the same comparison inside one
   run (the engine calls ARE raw vLLM on the same prompts), which a shared machine's load
   drift between phases cannot move. A third replay sends all recorded prompts in ONE
   ``generate`` call: what a batch costs when no turn waits for the slowest episode of the
   previous one (an estimate: that call finds less in the prefix cache). ``--profile N``
   prints the top N functions of one more harness run under cProfile (all, then ours).
3. **Reproducibility.** The records of every repeat must be equal (timings and run id aside),
   and so must the engine calls the policy made: seeded sampling gives the same tokens run
   after run, at any number of episodes in flight (on the CPU build too: vllm_backend).
   **Tokens and the response cache**: each record's ``prompt_tokens``/``completion_tokens``
   are the prompt's and the reply's ids; a run that fills a response cache and a rerun
   answered from it (no engine call) write the records of the uncached runs.
4. **Tools** through the same engine (the template's rendering and the Hermes parser).
5. **Log-prob equality.** One episode's trajectory is scored by a separate scoring engine
   (prefix caching off, built from its spec as ``multiturn-envs nll`` does), started after the
   generation engine is shut down, so the two never have to fit side by side.
6. **The CPU build's guard.** A policy over an engine with chunked prefill on (the scoring
   engine) is refused there with the fix (seeded sampling would kill it: vllm_backend).

Usage (the GPU machine; needs vllm, transformers, tokenizers):
    python benchmarks/gpu_vllm_check.py                      # tiny random model built here
    python benchmarks/gpu_vllm_check.py --model /path/to/hf_model --dtype bfloat16
On vLLM's CPU build (its own environment; ``VLLM_CPU_OMP_THREADS_BIND`` and
``OMP_NUM_THREADS`` decide the engine's cores) the tiny model is the stand-in; a workload where
the engine dominates (docs/policies.md, "The GPU check"):
    python benchmarks/gpu_vllm_check.py --hidden-size 512 --layers 8 --tasks 8 --samples 8
The CI test runs ``--tasks 4 --samples 4 --turns 4 --repeats 2`` (16 episodes in flight).
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import json
import multiprocessing
import os
import pstats
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from typing import Any

from multiturn_envs.policies.base import Reply, TurnRequest
from multiturn_envs.policies.prompting import Completion
from multiturn_envs.policies.sampling import Sampling
from multiturn_envs.policies.token_sequences import trajectory_sequences

ENV_ID = "MT/FrozenLake-v0"

Call = tuple[list[list[int]], list[int], int]
"""One engine call the policy made: its token-id prompts, seeds and samples per prompt."""


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--model", default=None, help="HF model folder (default: tiny model)")
    parser.add_argument("--hidden-size", type=int, default=128, help="tiny model's width")
    parser.add_argument("--layers", type=int, default=2, help="tiny model's layers")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--tasks", type=int, default=16)
    parser.add_argument("--samples", type=int, default=16)
    parser.add_argument("--turns", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--in-flight", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3, help="harness/raw pairs (>= 2)")
    parser.add_argument("--max-model-len", type=int, default=4096)
    parser.add_argument(
        "--gpu-memory-utilization",
        type=float,
        default=0.85,
        help="fraction of the device's memory for one engine (engines run one at a time)",
    )
    parser.add_argument(
        "--kv-cache-gib",
        type=float,
        default=None,
        help="KV cache size instead of a memory fraction (default on the CPU build: 1 GiB, "
        "or VLLM_CPU_KVCACHE_SPACE)",
    )
    parser.add_argument(
        "--enforce-eager", action="store_true", help="no compilation (faster start)"
    )
    parser.add_argument("--profile", type=int, default=0, help="cProfile one run; top N lines")
    parser.add_argument(
        "--gc-freeze",
        action="store_true",
        help="gc.freeze() once the engine is up (both phases): full collections then skip the "
        "startup heap (vLLM, torch), as vLLM's engine core does in its own process",
    )
    args = parser.parse_args()
    if args.repeats < 2:
        parser.error("--repeats must be >= 2 (the records of two runs are compared)")
    return args


def engine_args(args: argparse.Namespace, vllm: Any) -> dict[str, Any]:
    """The engine arguments both engines share (the policy adds its own: vllm_backend)."""
    from multiturn_envs.policies.vllm_backend import on_cpu

    engine: dict[str, Any] = {
        "dtype": args.dtype,
        "max_model_len": args.max_model_len,
        "gpu_memory_utilization": args.gpu_memory_utilization,
        "enforce_eager": args.enforce_eager,
    }
    gib = args.kv_cache_gib
    if gib is None and on_cpu(vllm) and not os.environ.get("VLLM_CPU_KVCACHE_SPACE"):
        gib = 1.0  # a memory fraction of a shared host would be gigabytes per engine
    if gib is not None:
        engine["kv_cache_memory_bytes"] = int(gib * 2**30)
    return engine


def records_of(path: str) -> list[dict[str, Any]]:
    """A run's records without what may differ between equal runs (timings, run id), by key."""
    from multiturn_envs.harness import read_run

    records = []
    for record in read_run(path).records:
        kept = {k: v for k, v in record.items() if k not in ("timings", "run_id")}
        records.append(kept)
    return sorted(records, key=lambda r: (r["task_id"], r["sample"], r["max_turns"]))


class GcClock:
    """Seconds this process spends in the garbage collector (``gc.callbacks``), and how many
    full (generation 2) collections: vLLM's output processing allocates per token, and a full
    collection walks every live container, kept token ids included."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.full = 0
        self._t0 = 0.0
        gc.callbacks.append(self._tick)

    def _tick(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._t0 = time.perf_counter()
        else:
            self.seconds += time.perf_counter() - self._t0
            self.full += info.get("generation") == 2

    def read(self) -> tuple[float, int]:
        return self.seconds, self.full


def timed_policy(llm: Any, sampling: Sampling, cache: str | None = None) -> Any:
    """A fresh :class:`VLLMPolicy` over ``llm`` (no kept ids from an earlier run) that records
    every engine call (``calls``) and times the engine (``engine_s``) and ``act`` (``act_s``);
    ``cache``: a response cache file (a question found there makes no engine call)."""
    from multiturn_envs.policies.vllm_backend import VLLMPolicy

    class TimedPolicy(VLLMPolicy):
        def __init__(self) -> None:
            super().__init__(llm, sampling, cache=cache)
            self.calls: list[Call] = []
            self.engine_s = self.act_s = 0.0

        def act(self, requests: Sequence[TurnRequest]) -> list[Reply]:
            t0 = time.perf_counter()
            try:
                return super().act(requests)
            finally:
                self.act_s += time.perf_counter() - t0

        def generate_ids(
            self, prompts: Sequence[Sequence[int]], seeds: Sequence[int], n: int = 1
        ) -> list[list[Completion]]:
            self.calls.append(([list(p) for p in prompts], list(seeds), n))
            t0 = time.perf_counter()
            try:
                return super().generate_ids(prompts, seeds, n)
            finally:
                self.engine_s += time.perf_counter() - t0

    return TimedPolicy()


class Workload:
    """The harness's episodes and their replay on the bare engine, on one engine."""

    def __init__(self, args: argparse.Namespace, llm: Any, sampling: Sampling) -> None:
        import gymnasium as gym

        import multiturn_envs  # noqa: F401 (registers MT/*)
        from multiturn_envs.harness import EvalConfig
        from multiturn_envs.policies.vllm_backend import import_vllm

        self.vllm = import_vllm()
        self.llm = llm
        self.sampling = sampling
        self.in_flight = args.in_flight
        self.workdir = tempfile.mkdtemp(prefix="gpu_vllm_check_records_")
        self.gc = GcClock()
        self.gc_spent = (0.0, 0)  # the last phase's (seconds, full collections) in the GC
        self.config = EvalConfig(
            env_id=ENV_ID,
            policy="vllm",
            tasks=list(gym.make(ENV_ID).unwrapped.task_ids())[: args.tasks],
            samples=args.samples,
            max_turns=args.turns,
            seed=0,
        )

    def harness(self, tag: str, cache: str | None = None) -> tuple[float, Any, str]:
        """One ``run_eval`` from an empty prefix cache: seconds, the timed policy, the file
        (``cache``: the policy's response cache file)."""
        from multiturn_envs.harness import run_eval

        policy = timed_policy(self.llm, self.sampling, cache)
        path = f"{self.workdir}/records-{tag}.jsonl"
        self.llm.reset_prefix_cache()
        gc0, full0 = self.gc.read()
        t0 = time.perf_counter()
        run_eval(self.config, policy, path, in_flight=self.in_flight, progress=False)
        seconds = time.perf_counter() - t0
        self.gc_spent = (self.gc.seconds - gc0, self.gc.full - full0)
        return seconds, policy, path

    def raw(self, calls: list[Call]) -> tuple[float, int]:
        """The same engine calls on the bare engine, from an empty prefix cache."""
        from multiturn_envs.policies.vllm_backend import sampling_params

        vllm, llm = self.vllm, self.llm
        llm.reset_prefix_cache()
        seconds, tokens = 0.0, 0
        gc0, full0 = self.gc.read()
        for prompts, seeds, n in calls:
            t0 = time.perf_counter()
            batch = [vllm.TokensPrompt(prompt_token_ids=p) for p in prompts]
            params = [sampling_params(vllm, self.sampling, n, s) for s in seeds]
            outs = llm.generate(batch, params, use_tqdm=False)
            seconds += time.perf_counter() - t0
            tokens += sum(len(o.token_ids) for r in outs for o in r.outputs)
        self.gc_spent = (self.gc.seconds - gc0, self.gc.full - full0)
        return seconds, tokens

    def one_call(self, calls: list[Call]) -> float:
        """Every recorded prompt in ONE engine call (same seeds, so the same tokens)."""
        self.llm.reset_prefix_cache()
        prompts = [p for c in calls for p in c[0]]
        seeds = [s for c in calls for s in c[1]]
        t0 = time.perf_counter()
        timed_policy(self.llm, self.sampling).generate_ids(prompts, seeds, 1)
        return time.perf_counter() - t0


def spread(name: str, ratios: list[float]) -> str:
    """``name: median m (min a, max b, n repeats)``."""
    median = statistics.median(ratios)
    return (
        f"{name}: median {median:.3f} (min {min(ratios):.3f}, max {max(ratios):.3f}, "
        f"{len(ratios)} repeats)"
    )


def compare(work: Workload, repeats: int) -> list[Call]:
    """Harness and raw vLLM, ``repeats`` times in ABBA order (harness first on odd repeats,
    raw first on even ones, replaying the previous repeat's calls: a drift in the machine's
    load then cancels instead of favouring one side); the ratios, their spread, the split of
    the harness's time, and whether all repeats wrote equal records and made equal engine
    calls. Returns the engine calls."""
    ratios: list[float] = []
    in_run: list[float] = []
    first: list[dict[str, Any]] | None = None
    reproducible = True
    calls: list[Call] | None = None
    tokens = 0
    for rep in range(repeats):
        raw_first = calls is not None and rep % 2 == 1
        if raw_first:
            assert calls is not None
            raw_s, tokens = work.raw(calls)
            raw_gc = work.gc_spent
        harness_s, policy, path = work.harness(str(rep))
        harness_gc = work.gc_spent
        reproducible = reproducible and (calls is None or policy.calls == calls)
        calls = policy.calls
        if not raw_first:
            raw_s, tokens = work.raw(calls)
            raw_gc = work.gc_spent
        ratios.append(harness_s / raw_s)
        in_run.append(harness_s / policy.engine_s)
        print(
            f"repeat {rep + 1} ({'raw' if raw_first else 'harness'} first): harness "
            f"{harness_s:.2f} s = engine {policy.engine_s:.2f} s + policy "
            f"{policy.act_s - policy.engine_s:.2f} s (prompts, replies) + harness "
            f"{harness_s - policy.act_s:.2f} s (requests, env steps, records); "
            f"raw vLLM {raw_s:.2f} s; ratio {ratios[-1]:.3f}; in the garbage collector: "
            f"harness {harness_gc[0]:.2f} s ({harness_gc[1]} full), raw {raw_gc[0]:.2f} s "
            f"({raw_gc[1]} full)"
        )
        records = records_of(path)
        if first is None:
            first = records
        else:
            reproducible = reproducible and records == first
    assert calls is not None
    print(f"episodes: {len(first or [])}, policy calls: {len(calls)}, generated tokens: {tokens}")
    print(
        f"{spread('harness / raw vLLM', ratios)}; overhead "
        f"{statistics.median(ratios) - 1:+.1%} (goal < +10%)"
    )
    print(spread("harness / its own engine calls (same run, no load drift)", in_run))
    print(f"records equal across repeats: {reproducible}")
    return calls


def check_tokens_and_cache(work: Workload) -> None:
    """The tokens a record keeps per turn are what the engine read and wrote (the prompt's
    ids, the reply's ids), and a run answered from the response cache makes no engine call and
    writes the records of the run that filled it, which are those of the uncached runs."""
    uncached = records_of(f"{work.workdir}/records-0.jsonl")
    counted = all(
        r["prompt_tokens"] == [t["prompt_len"] for t in r["turn_tokens"]]
        and r["completion_tokens"] == [len(t["ids"]) for t in r["turn_tokens"]]
        for r in uncached
    )
    print(f"tokens per turn are the prompt's and the reply's ids: {counted}")
    cache = f"{work.workdir}/responses.sqlite"
    _, filling, filled = work.harness("cache-fill", cache)
    _, answered, rerun = work.harness("cache-rerun", cache)
    same = records_of(filled) == records_of(rerun) == uncached
    print(
        f"response cache: {len(filling.calls)} engine calls filled it, the rerun made "
        f"{len(answered.calls)}; records equal to the uncached run's: {same}"
    )


def main() -> None:
    args = parse_args()
    from multiturn_envs.policies.vllm_backend import import_vllm

    vllm = import_vllm()
    if args.model is not None:
        run_checks(args, vllm, args.model)
        return
    from multiturn_envs.rl.tiny_lm import build_tiny_chat_model

    # the junk sampler of the tests (tests/conftest.py ``tiny_dir``): with the attention
    # biases at 1.0 its replies vary in length and content, which the throughput and
    # log-prob checks need; the fixed init's random model repeats one token
    with tempfile.TemporaryDirectory(prefix="gpu_vllm_check_model_") as folder:
        model = build_tiny_chat_model(
            folder, qkv_bias=1.0, hidden_size=args.hidden_size, layers=args.layers
        )
        run_checks(args, vllm, str(model))


def run_checks(args: argparse.Namespace, vllm: Any, model: str) -> None:
    """Every check of the module docstring on ``model``; each engine is stopped on return."""
    import gymnasium as gym

    from multiturn_envs.policies import load_scoring_model
    from multiturn_envs.policies.vllm_backend import VLLMPolicy, on_cpu, shutdown_engine

    engine = engine_args(args, vllm)
    sampling = Sampling(temperature=1.0, max_tokens=args.max_tokens)
    print(
        f"platform: {'cpu' if on_cpu(vllm) else 'gpu'}, vllm {vllm.__version__}, "
        f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}, "
        f"VLLM_CPU_OMP_THREADS_BIND={os.environ.get('VLLM_CPU_OMP_THREADS_BIND', 'auto')}, "
        f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )
    t0 = time.perf_counter()
    owner = VLLMPolicy(model, sampling, **engine)
    print(f"engine init: {time.perf_counter() - t0:.1f} s ({json.dumps(engine)})")
    work = Workload(args, owner.llm, sampling)
    timed_policy(owner.llm, sampling).generate_ids([[1, 2, 3]], [0], 1)  # warm-up
    if args.gc_freeze:
        gc.collect()
        gc.freeze()
        print(f"gc.freeze(): {gc.get_freeze_count()} objects no full collection walks")
    calls = compare(work, args.repeats)
    check_tokens_and_cache(work)
    one_s = work.one_call(calls)
    print(
        f"raw vLLM, all {sum(len(c[0]) for c in calls)} prompts in one call "
        f"(no turn barrier): {one_s:.2f} s"
    )
    if args.profile:
        profiler = cProfile.Profile()
        profiler.enable()
        work.harness("profile")
        profiler.disable()
        stats = pstats.Stats(profiler)
        stats.sort_stats("tottime").print_stats(args.profile)  # everything, vLLM's included
        # the harness's and the prompting layer's own functions, and the tokenizer's encode
        stats.sort_stats("cumulative").print_stats("multiturn_envs|encode_batch", args.profile)

    replies = logprob_episode(gym, owner.llm, sampling)
    check_tools(gym, owner.llm, sampling)
    owner.close()  # the scoring engine gets the memory the generation engine held
    engines = multiprocessing.active_children()  # vLLM's engine core is a spawned child
    print(f"generation engine stopped: {not engines}")
    # the scorer through its spec, as `multiturn-envs nll --scoring-model vllm:...` builds it
    spec = f"vllm:{model},dtype={args.dtype},max_model_len={args.max_model_len}"
    spec += f",gpu_memory_utilization={args.gpu_memory_utilization},enforce_eager=true"
    if "kv_cache_memory_bytes" in engine:
        spec += f",kv_cache_memory_bytes={engine['kv_cache_memory_bytes']}"
    t0 = time.perf_counter()
    scoring = load_scoring_model(spec)
    init_s = time.perf_counter() - t0
    print(f"scoring model: {scoring.engine}/{scoring.dtype} (init {init_s:.1f} s)")
    scored = scoring.scorer.score(trajectory_sequences(replies))[0]
    delta = max(
        abs(a - b) for span, r in zip(scored, replies) for a, b in zip(span, r.logprobs or [])
    )
    print(f"log-prob equality, generation vs scoring engine: max |delta| = {delta:.2e}")
    check_refusal(vllm, scoring.scorer.llm, sampling)
    shutdown_engine(scoring.scorer.llm)
    print(f"every engine stopped: {not multiprocessing.active_children()}")


def logprob_episode(gym: Any, llm: Any, sampling: Sampling) -> list[Reply]:
    """One 3-turn episode's replies (with their generation log-probs), to score later."""
    from multiturn_envs.policies.vllm_backend import VLLMPolicy

    policy = VLLMPolicy(llm, sampling)
    env = gym.make(ENV_ID, max_turns=3).unwrapped
    env.reset(seed=0)
    replies: list[Reply] = []
    for turn in range(3):
        if env.done:
            break
        req = TurnRequest(messages=env.messages(), env=env, seed=turn, episode_id="check")
        (reply,) = policy.act([req])
        replies.append(reply)
        env.step(reply.text)
    return replies


def check_refusal(vllm: Any, llm: Any, sampling: Sampling) -> None:
    """On the CPU build, a policy over an engine with chunked prefill on (the scoring engine's
    default) is refused with the fix, rather than run until seeded sampling kills it."""
    from multiturn_envs.policies.vllm_backend import VLLMPolicy, on_cpu

    if not on_cpu(vllm):
        print("chunked-prefill engine refused: n/a (not the CPU build)")
        return
    try:
        VLLMPolicy(llm, sampling)
    except ValueError as exc:
        print(f"chunked-prefill engine refused: True ({str(exc)[:60]}...)")
    else:
        print("chunked-prefill engine refused: False")


def check_tools(gym: Any, llm: Any, sampling: Sampling) -> None:
    """The env's tools through the same engine: rendered by the template (or the Hermes
    wording for a template without tools), each reply read with the Hermes parser."""
    from multiturn_envs.policies.vllm_backend import VLLMPolicy

    tooled = VLLMPolicy(llm, sampling, tools=True)
    env = gym.make(ENV_ID, max_turns=3).unwrapped
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


if __name__ == "__main__":  # the engine core runs in a spawned process
    main()
    # Every engine is stopped and every line written by now. The interpreter's own teardown is
    # skipped: there, vLLM's CPU build has aborted the process now and then ("terminate called
    # without an active exception", SIGABRT: about one CI run in three) after a complete run.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
