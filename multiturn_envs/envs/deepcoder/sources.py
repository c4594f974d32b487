"""The task sources by name: what ``gym.make("MT/DeepCoder-v0", dataset=...)`` chooses from.

Apart from :mod:`.tasks` (the task type and the bundled set), so that the sources built on
that type (:mod:`.humaneval`, :mod:`.deepcoder_preview`) never form an import cycle with it.
"""

from __future__ import annotations

from typing import Any

from multiturn_envs.envs.deepcoder.tasks import BundledSource, TaskSource

__all__ = ["DATASETS", "make_source"]


DATASETS: tuple[str, ...] = ("bundled", "humaneval", "deepcoder")


def make_source(dataset: str = "bundled", **options: Any) -> TaskSource:
    """Build the task source named ``dataset`` with its options.

    ``"bundled"`` (``difficulty``, ``style``), ``"humaneval"`` (no options) or ``"deepcoder"``
    (see :class:`multiturn_envs.envs.deepcoder.deepcoder_preview.DeepCoderPreviewSource`).
    """
    if dataset == "bundled":
        return BundledSource(**options)
    if dataset == "humaneval":
        from multiturn_envs.envs.deepcoder.humaneval import HumanEvalSource  # data read lazily

        return HumanEvalSource(**options)
    if dataset == "deepcoder":
        from multiturn_envs.envs.deepcoder.deepcoder_preview import DeepCoderPreviewSource

        return DeepCoderPreviewSource(**options)
    raise ValueError(f"dataset must be one of {DATASETS}, got {dataset!r}")
