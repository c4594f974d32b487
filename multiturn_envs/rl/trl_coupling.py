"""What our trainer relies on in TRL, stated once and checked: versions and private internals.

:class:`~multiturn_envs.rl.trainer.MultiTurnGRPOTrainer` subclasses TRL's ``GRPOTrainer`` and
overrides one private method, ``_generate_and_score_completions``: it calls TRL's own, then
reads the finished environments and (for GiGPO) replaces the advantages. That is the whole
coupling, and it is the smallest one TRL's design allows (advantages are computed inline in
that method; ``rollout_func`` would mean re-implementing TRL's tool loop):

* the method exists and takes ``(self, inputs)``;
* it returns a dict with ``completion_ids`` and ``completion_mask`` (B, T), ``tool_mask``
  (1 = a model token, 0 = a tool result; present when the env has tools) and
  ``advantages`` ((B,), replaced by (B, T)), and TRL's loss (``_compute_loss``) accepts
  (B, T) advantages (it unsqueezes only 1-D ones);
* when it returns, ``self.environments[i]`` is the environment of output row ``i`` (the G
  rollouts of a group adjacent), ``self.num_generations`` is G and ``self._metrics[mode]``
  takes our figures.

:data:`SUPPORTED_TRL` is the range the ``[trl]`` extra pins (pyproject.toml reads the same;
tested); :func:`trl_coupling_problem` checks the internals above on the installed TRL and says
which one moved. The trainer calls :func:`check_trl` at construction: a TRL outside the range
warns, a moved internal is a ``RuntimeError`` naming it, not a wrong advantage at step 500.
"""

from __future__ import annotations

import inspect
import warnings
from typing import Any

__all__ = [
    "OUTPUT_KEYS",
    "SUPPORTED_TRL",
    "TESTED_TRL",
    "check_trl",
    "trl_coupling_problem",
    "trl_version_supported",
]

SUPPORTED_TRL = ">=1.16,<1.17"
"""The TRL versions the trainer is known to work with (the ``[trl]`` extra's pin)."""

TESTED_TRL: tuple[str, ...] = ("1.16.0",)
"""TRL releases the test suite has run against."""

OUTPUT_KEYS: tuple[str, ...] = ("completion_ids", "completion_mask", "tool_mask", "advantages")
"""Keys of ``_generate_and_score_completions``'s output the trainer reads (``tool_mask``
exists when the env has tools: all ours do)."""


def _source(obj: Any) -> str:
    try:
        return inspect.getsource(obj)
    except (OSError, TypeError):
        return ""


def trl_coupling_problem(trainer_cls: Any = None) -> str | None:
    """What of TRL's private surface the trainer relies on has moved, or ``None``.

    ``trainer_cls``: the class to inspect (default: the installed ``trl.GRPOTrainer``).
    """
    if trainer_cls is None:
        from trl import GRPOTrainer

        trainer_cls = GRPOTrainer
    method = getattr(trainer_cls, "_generate_and_score_completions", None)
    if method is None:
        return "GRPOTrainer._generate_and_score_completions is gone"
    params = list(inspect.signature(method).parameters)
    if params != ["self", "inputs"]:
        return f"GRPOTrainer._generate_and_score_completions takes {params}, not (self, inputs)"
    body = _source(method)
    missing = [key for key in OUTPUT_KEYS if f'"{key}"' not in body]
    if missing:
        return f"GRPOTrainer._generate_and_score_completions no longer returns {missing}"
    loss = _source(getattr(trainer_cls, "_compute_loss", None))
    if not loss or "advantages.dim() == 1" not in loss:
        return "GRPOTrainer._compute_loss may no longer accept (B, T) advantages"
    cls_source = _source(trainer_cls)
    for attribute in ("self.environments", "self.num_generations", "self._metrics"):
        if attribute not in cls_source:
            return f"GRPOTrainer no longer sets {attribute}"
    return None


def trl_version_supported(version: str) -> bool:
    """Whether ``version`` lies in :data:`SUPPORTED_TRL`."""
    from packaging.specifiers import SpecifierSet

    return version in SpecifierSet(SUPPORTED_TRL)


def check_trl() -> None:
    """Raise a clear ``RuntimeError`` when TRL's internals moved; warn outside the range."""
    import trl

    problem = trl_coupling_problem()
    if problem is not None:
        raise RuntimeError(
            f"TRL {trl.__version__}: {problem}. MultiTurnGRPOTrainer overrides TRL's private "
            f"_generate_and_score_completions and works with TRL {SUPPORTED_TRL} "
            f"(tested: {', '.join(TESTED_TRL)}): pip install 'trl{SUPPORTED_TRL}'"
        )
    if not trl_version_supported(str(trl.__version__)):
        warnings.warn(
            f"TRL {trl.__version__} is outside the versions MultiTurnGRPOTrainer is known to "
            f"work with ({SUPPORTED_TRL}); its internals still look right, but check the "
            "first steps' advantages",
            stacklevel=3,
        )
