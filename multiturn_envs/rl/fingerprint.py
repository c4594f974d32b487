"""What a user needs to know to compare two training runs: a run's fingerprint.

A CPU training run here is deterministic: the same code, package versions, floating-point path,
seed and configuration give the same records to the last digit. Change any of them and a
32-step GRPO run can move by several points, because training is chaotic and a last-bit
difference in one kernel grows. The float path is the part a user does not see: torch picks its
vectorised kernels by the CPU's instruction sets (``torch.backends.cpu.get_cpu_capability()``,
overridable with ``ATEN_CPU_CAPABILITY``), MKL picks its own (``MKL_ENABLE_INSTRUCTIONS``,
``MKL_CBWR``), and the number of threads changes the order of reductions. So two runs are
comparable digit for digit only when their fingerprints are equal, and only conclusions pooled
over seeds should be compared across machines.

:func:`run_fingerprint` collects the fingerprint; :func:`config_digest` is the stable digest of
a configuration (key order does not matter) that tells whether runs may be pooled.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import platform
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["FLOAT_PATH_VARIABLES", "PACKAGES", "config_digest", "run_fingerprint"]

PACKAGES = (
    "multiturn-envs",
    "torch",
    "transformers",
    "trl",
    "accelerate",
    "datasets",
    "tokenizers",
    "numpy",
)
"""The distributions whose versions change a training run's numbers."""

FLOAT_PATH_VARIABLES = (
    "ATEN_CPU_CAPABILITY",
    "MKL_ENABLE_INSTRUCTIONS",
    "MKL_CBWR",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
)
"""Environment variables that choose kernels or thread counts (recorded when set)."""

_CPUINFO_BYTES = 65_536  # the first processor's block is well within this


def config_digest(config: Mapping[str, Any]) -> str:
    """The first 16 hex digits of the SHA-256 of ``config`` as canonical JSON (sorted keys,
    no whitespace): equal configurations give equal digests whatever their key order."""
    text = json.dumps(config, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def _version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _cpu_model() -> str:
    """The CPU's model name (Linux ``/proc/cpuinfo``), else the platform's processor string."""
    path = Path("/proc/cpuinfo")
    try:
        with path.open("rb") as f:
            text = f.read(_CPUINFO_BYTES).decode("utf-8", "replace")
    except OSError:
        return platform.processor() or "unknown"
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model name":
            return value.strip()[:200]
    return platform.processor() or "unknown"


def run_fingerprint(config: Mapping[str, Any], *, seed: int) -> dict[str, Any]:
    """The fingerprint of a run of ``config`` with ``seed`` in this process, as JSON-ready data.

    Fields: ``config_digest`` (:func:`config_digest` of ``config``: pass what must match for
    runs to be pooled, without the seed), ``seed``, ``packages`` (versions of
    :data:`PACKAGES`), ``python``, ``cpu_capability`` (torch's kernel set), ``threads``
    (torch's intra-op threads now), ``float_path_env`` (the :data:`FLOAT_PATH_VARIABLES` that
    are set), ``machine`` and ``cpu``. Call it where the run's threads are already set.
    """
    import torch

    return {
        "config_digest": config_digest(config),
        "seed": int(seed),
        "packages": {name: _version(name) for name in PACKAGES},
        "python": platform.python_version(),
        "cpu_capability": str(torch.backends.cpu.get_cpu_capability()),
        "threads": int(torch.get_num_threads()),
        "float_path_env": {k: os.environ[k] for k in FLOAT_PATH_VARIABLES if k in os.environ},
        "machine": platform.machine(),
        "cpu": _cpu_model(),
    }
