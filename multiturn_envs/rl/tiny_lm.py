"""A tiny random-weight chat model (Qwen2 architecture, ChatML template) built offline.

Tests, benchmarks and the vLLM GPU check need a real model and tokenizer but no hub access: this
trains a 512-token byte-level BPE tokenizer on synthetic lines (every byte is covered, so any
text round-trips) and initialises a small Qwen2 model from a seed. Its replies are junk, which is
the point for parsers: they must tolerate it. ``head_dim=64`` (``hidden_size=128``, 2 heads)
because vLLM's attention kernels support only some head sizes.

The initialisation is Hugging Face's in kind: weight matrices and embeddings normal (std 0.02,
from the seed), norm weights 1, and the q/k/v attention biases 0. Earlier versions filled every
1-D parameter with 1.0, meant for the norms, so the biases were 1 too. Under rotary position
embeddings an all-ones query bias and key bias add a score that depends only on the distance
between two positions and dwarfs the content's: attention became a content-blind recency
pattern, and a trained model could not look anything up in its prompt (the study's base never
learned to read the map). ``qkv_bias=1.0`` rebuilds that model
bit for bit, for the record files it wrote and for tests that want its junk.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = [
    "CHATML_TEMPLATE",
    "SPECIAL_TOKENS",
    "build_tiny_chat_model",
    "load_tiny_chat_model",
]

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")


def _corpus(n: int = 300) -> list[str]:
    """Deterministic synthetic lines in the shape of env observations and actions."""
    words = [
        "left",
        "right",
        "up",
        "down",
        "Action:",
        "goal",
        "hole",
        "frozen",
        "turn",
        "SELECT",
        "FROM",
        "WHERE",
        "def",
        "return",
        "you",
        "are",
        "at",
        "row",
        "column",
        "the",
        "a",
    ]
    lines = []
    for i in range(n):
        picked = [words[(i * 7 + j * 3) % len(words)] for j in range(3 + i % 9)]
        lines.append(" ".join(picked) + f" {i % 17}.\n")
    return lines


def build_tiny_chat_model(
    directory: str | Path,
    *,
    seed: int = 0,
    vocab_size: int = 512,
    hidden_size: int = 128,
    layers: int = 2,
    heads: int = 2,
    kv_heads: int = 1,
    embedding_scale: float = 4.0,
    qkv_bias: float = 0.0,
) -> Path:
    """Write a tiny Qwen2 chat model and its tokenizer to ``directory``; return the folder.

    ``embedding_scale`` multiplies the random embeddings so that the softmax is not near
    uniform (replies then repeat tokens and often end; at x1 they run to ``max_tokens``).
    ``qkv_bias``: the start value of the q/k/v attention biases (0, as Hugging Face
    initialises them; 1.0 only to rebuild the models of earlier versions, see the module note).
    """
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import (
        GenerationConfig,
        PreTrainedTokenizerFast,
        Qwen2Config,
        Qwen2ForCausalLM,
    )

    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(_corpus(), trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe, eos_token="<|im_end|>", pad_token="<|endoftext|>"
    )
    tokenizer.chat_template = CHATML_TEMPLATE
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"),
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    generator = torch.Generator().manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith(".bias"):  # q/k/v projections: zero, as in the default init
                param.fill_(qkv_bias)
            elif param.dim() == 1:  # norms: ones, as in the default init
                param.fill_(1.0)
            else:
                param.copy_(torch.randn(param.shape, generator=generator) * 0.02)
        model.get_input_embeddings().weight.mul_(embedding_scale)
    model.generation_config = GenerationConfig(
        do_sample=True,
        top_k=0,
        top_p=1.0,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def load_tiny_chat_model(directory: str | Path) -> tuple[Any, Any]:
    """Reload what :func:`build_tiny_chat_model` wrote (float32, CPU, eval mode)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(directory))
    model = AutoModelForCausalLM.from_pretrained(str(directory), dtype=torch.float32).eval()
    return model, tokenizer
