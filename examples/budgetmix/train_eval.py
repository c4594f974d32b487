"""BudgetMix recipe: GRPO on FrozenLake with fixed budgets and with BudgetMix, then Pass@(K,T).

    OMP_NUM_THREADS=1 .venv/bin/python examples/budgetmix/train_eval.py \
        --config examples/budgetmix/config.json --out runs/budgetmix

Every arm starts from the same model. Each fixed budget T of ``fixed_budgets`` trains with rows
whose ``max_turns`` column is T; the BudgetMix arm wraps the env in
``multiturn_envs.wrappers.BudgetMix`` so each row's seed draws its budget (the G rollouts of a
GRPO group share the row, hence the budget). Training is TRL's ``GRPOTrainer`` through
``multiturn_envs.adapters.trl``: its env interface passes every row column to ``reset``, so it
expresses per-reset budgets and no GRPO loop of our own is needed. Every arm (and the start
model) is then evaluated by the harness with a hidden budget at ``eval.max_turns``: one run gives
the whole Pass@(K,T) surface, printed side by side and written to ``<out>/summary.json``.

``model: "tiny"`` builds a random tiny model offline and teaches it the tool-call format (a
stand-in that makes the recipe run on a CPU in minutes; its numbers mean nothing). Any causal LM
folder with a tool-capable chat template scales it up: set ``model`` to the folder,
``warm_start_steps`` to 0, and raise ``grpo.max_steps``, ``grpo.num_generations``, the task lists
and ``eval.samples``.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

import gymnasium as gym
import numpy as np

import multiturn_envs  # noqa: F401
from multiturn_envs.adapters.trl import TRLEnvironment, grpo_rows
from multiturn_envs.wrappers import BudgetMix, ProcessReward


def make_env(config: dict[str, Any], budget_mix: bool) -> gym.Env[str, str]:
    """The training env of an arm: FrozenLake, the oracle's step reward, BudgetMix or not."""
    env_budget = max(config["budget_mix"]["budgets"] + config["fixed_budgets"])
    env: gym.Env[str, str] = gym.make(
        config["env_id"], max_turns=env_budget, disable_env_checker=True, **config["env_kwargs"]
    )
    if config["step_weight"]:
        env = ProcessReward(env, step_weight=config["step_weight"])
    if budget_mix:
        mix = config["budget_mix"]
        env = BudgetMix(env, budgets=mix["budgets"], weights=mix["weights"])
    return env


def tool_chats(config: dict[str, Any], system: str, n: int, seed: int) -> list[list[Any]]:
    """Random-action episodes in TRL's tool layout (to fit the tiny model's tokenizer)."""
    from multiturn_envs.rl.tool_format import tool_chat_messages

    env = make_env(config, budget_mix=False)
    base = env.unwrapped
    rng = np.random.default_rng(seed)
    chats = []
    for i in range(n):
        env.reset(
            seed=i, options={"task_id": config["train_tasks"][i % len(config["train_tasks"])]}
        )
        done = False
        while not done:
            _, _, terminated, truncated, _ = env.step(base.random_action(rng))
            done = terminated or truncated
        chats.append(tool_chat_messages(base.messages(), system))
    env.close()
    return chats


def start_model(config: dict[str, Any], out: Path, system: str) -> Path:
    """The folder every arm starts from (built and warm-started for ``model: "tiny"``)."""
    from multiturn_envs.rl.tool_format import warm_start_tool_calls
    from multiturn_envs.testing.tiny_agent import build_tiny_tool_model
    from multiturn_envs.testing.tiny_lm import load_tiny_chat_model

    probe = TRLEnvironment(make_env(config, budget_mix=False))
    folder = Path(config["model"]) if config["model"] != "tiny" else out / "start"
    if config["model"] == "tiny":
        build_tiny_tool_model(
            folder,
            tool_chats(config, system, 32, config["seed"]),
            tools=[probe.act],
            system=system,
            extra_texts=["Done."],
            vocab_size=1024,
            seed=config["seed"],
        )
    if config["warm_start_steps"]:
        model, tokenizer = load_tiny_chat_model(folder)
        report = warm_start_tool_calls(
            model,
            tokenizer,
            lambda: make_env(config, budget_mix=False),
            [probe.act],
            tasks=config["train_tasks"],
            system=system,
            episodes=32,
            steps=config["warm_start_steps"],
            lr=5e-3,
            seed=config["seed"],
        )
        print(f"warm start: {report}")
        folder = out / "start-warm"
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
    return folder


def train_arm(config: dict[str, Any], start: Path, out: Path, budget: int | None) -> Path:
    """GRPO from ``start``: a fixed ``budget``, or BudgetMix when ``budget`` is None."""
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from multiturn_envs.testing.tiny_lm import load_tiny_chat_model

    grpo = config["grpo"]
    model, tokenizer = load_tiny_chat_model(start)
    model.train()
    rows_needed = grpo["max_steps"] * grpo["per_device_train_batch_size"] // grpo["num_generations"]
    tasks = [config["train_tasks"][i % len(config["train_tasks"])] for i in range(rows_needed)]
    rows = grpo_rows(
        make_env(config, budget_mix=False),
        tasks,
        seeds=[config["seed"] * 100_003 + i for i in range(rows_needed)],
        budgets=None if budget is None else [budget] * rows_needed,
        system_prompt="",
    )
    name = f"fixed-T{budget}" if budget is not None else "budgetmix"
    args = GRPOConfig(
        output_dir=str(out / name),
        max_steps=grpo["max_steps"],
        per_device_train_batch_size=grpo["per_device_train_batch_size"],
        num_generations=grpo["num_generations"],
        max_completion_length=grpo["max_completion_length"],
        max_tool_calling_iterations=max(config["budget_mix"]["budgets"] + config["fixed_budgets"]),
        learning_rate=grpo["learning_rate"],
        beta=grpo["beta"],
        temperature=grpo["temperature"],
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        use_cpu=not _cuda(),
        seed=config["seed"],
        shuffle_dataset=False,
    )
    mix = budget is None
    trainer = GRPOTrainer(
        model=model,
        processing_class=tokenizer,
        args=args,
        train_dataset=Dataset.from_list(rows),
        environment_factory=lambda: TRLEnvironment(make_env(config, budget_mix=mix)),
    )
    trainer.train()
    rewards = [e["reward"] for e in trainer.state.log_history if "reward" in e]
    print(f"{name}: reward per step {[round(r, 3) for r in rewards]}")
    folder = out / name / "model"
    trainer.model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def _cuda() -> bool:
    import torch

    return bool(torch.cuda.is_available())


def evaluate(config: dict[str, Any], folder: Path, out: Path, name: str) -> dict[str, Any]:
    """The harness's Pass@(K,T) surface of one model (hidden budget, one run at T_max)."""
    from multiturn_envs.harness import EvalConfig, run_eval
    from multiturn_envs.harness.records import read_run
    from multiturn_envs.harness.report import surface_of_run
    from multiturn_envs.policies.prompting import ActionExtractor, Sampling
    from multiturn_envs.policies.transformers_backend import TransformersPolicy
    from multiturn_envs.rl.tool_format import ACTION_PATTERN, ToolLayoutTokenizer
    from multiturn_envs.testing.tiny_lm import load_tiny_chat_model

    ev = config["eval"]
    model, tokenizer = load_tiny_chat_model(folder)
    probe = TRLEnvironment(make_env(config, budget_mix=False))
    policy = TransformersPolicy(
        model,
        ToolLayoutTokenizer(tokenizer, [probe.act]),
        Sampling(temperature=1.0, max_tokens=ev["max_tokens"]),
        name=name,
        system_prompt=grpo_rows(probe.env, ["x"], system_prompt="")[0]["prompt"][0]["content"],
        extractor=ActionExtractor(ACTION_PATTERN),
    )
    run = EvalConfig(
        env_id=config["env_id"],
        policy=name,
        tasks=config["eval_tasks"],
        samples=ev["samples"],
        max_turns=ev["max_turns"],
        seed=config["seed"],
        env_kwargs=config["env_kwargs"],
    )
    path = out / f"eval-{name}.jsonl"
    run_eval(run, policy, str(path), overwrite=True, progress=False)
    surface = surface_of_run(read_run(path), ks=ev["ks"], ts=ev["ts"])
    return {"ks": surface.ks.tolist(), "ts": surface.ts.tolist(), "values": surface.values.tolist()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(Path(__file__).with_name("config.json")))
    parser.add_argument("--out", default="runs/budgetmix")
    parsed = parser.parse_args()
    config = json.loads(Path(parsed.config).read_text())
    out = Path(parsed.out)
    out.mkdir(parents=True, exist_ok=True)
    import torch

    torch.manual_seed(config["seed"])
    if not _cuda():
        torch.set_num_threads(1)
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    system = grpo_rows(make_env(config, False), ["x"], system_prompt="")[0]["prompt"][0]["content"]
    start = start_model(config, out, system)
    timings["start_model_s"] = time.perf_counter() - t0
    arms: dict[str, Path] = {"start": start}
    for budget in config["fixed_budgets"]:
        t = time.perf_counter()
        arms[f"fixed-T{budget}"] = train_arm(config, start, out, budget)
        timings[f"train_fixed-T{budget}_s"] = time.perf_counter() - t
    t = time.perf_counter()
    arms["budgetmix"] = train_arm(config, start, out, None)
    timings["train_budgetmix_s"] = time.perf_counter() - t
    surfaces = {}
    for name, folder in arms.items():
        t = time.perf_counter()
        surfaces[name] = evaluate(config, folder, out, name)
        timings[f"eval_{name}_s"] = time.perf_counter() - t
    timings["total_s"] = time.perf_counter() - t0
    ev = config["eval"]
    print("\nPass@(K,T) (rows: arm and K; columns: T)")
    print(" " * 18 + "".join(f"T={t:<6}" for t in ev["ts"]))
    for name, s in surfaces.items():
        for i, k in enumerate(s["ks"]):
            print(f"{name:>12} K={k:<3}" + "".join(f"{v:<8.3f}" for v in s["values"][i]))
    summary = {"config": copy.deepcopy(config), "surfaces": surfaces, "timings_s": timings}
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    print(f"\ntimings (s): { {k: round(v, 1) for k, v in timings.items()} }")


if __name__ == "__main__":
    main()
