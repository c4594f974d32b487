"""The optional extras: which extra brings which module, and what each env and command needs.

The package installs light (``pip install multiturn-envs``: FrozenLake and BFCL, the harness,
the baselines); heavy parts are extras (``pyproject.toml``). This table is the one home of
which import belongs to which extra, so that a missing one is answered with one line naming
the extra (``multiturn-envs ...`` exits 2 with it; an env that needs one refuses to be made
without it, instead of failing later on some tasks only), and README's install section says
the same.
"""

from __future__ import annotations

import importlib.util
from types import MappingProxyType

__all__ = ["ENV_EXTRAS", "MODULE_EXTRAS", "MissingExtra", "extra_for", "missing_extra", "require"]

MODULE_EXTRAS = MappingProxyType(
    {
        "sqlglot": "sql",
        "re2": "sql",
        "docker": "docker",
        "yaml": "terminal",
        "matplotlib": "plot",
        "torch": "llm",
        "transformers": "llm",
        "tokenizers": "llm",
        "gguf": "llm",
        "accelerate": "llm",
        "httpx": "llm",
        "vllm": "vllm",
        "trl": "trl",
        "datasets": "data",
        "pyarrow": "data",
        "pettingzoo": "pettingzoo",
        "ray": "ray",
        "starlette": "server",
        "uvicorn": "server",
        "websockets": "server",
        "skyrl_gym": "skyrl",
        "verifiers": "verifiers",
        "inspect_ai": "inspect",
    }
)
"""Top-level module -> the extra that installs it."""

ENV_EXTRAS = MappingProxyType(
    {
        "MT/InterCode-SQL-v0": ("sql", ("sqlglot",)),
        "MT/DeepCoder-v0": ("docker", ("docker",)),
        "MT/Terminal-v0": ("terminal", ("docker", "yaml")),
    }
)
"""Env id -> (its extra, the modules it cannot run without). The others need none."""


class MissingExtra(ImportError):
    """An optional extra is not installed; the message names it and the command to install it."""


def extra_for(module: str | None) -> str | None:
    """The extra that installs ``module`` (a dotted name: its top level counts), if any."""
    if not module:
        return None
    return MODULE_EXTRAS.get(module.partition(".")[0])


def missing_extra(exc: BaseException) -> str | None:
    """One line for an import error of an optional dependency (``None``: not one of ours)."""
    if isinstance(exc, MissingExtra):
        return str(exc)
    if not isinstance(exc, ModuleNotFoundError):
        return None
    extra = extra_for(exc.name)
    if extra is None:
        return None
    return (
        f"this needs the [{extra}] extra (no module named {exc.name!r}): "
        f"pip install 'multiturn-envs[{extra}]'"
    )


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a module blocked (None in sys.modules) or broken
        return False


def require(what: str, extra: str, modules: tuple[str, ...]) -> None:
    """Raise :class:`MissingExtra` when one of ``modules`` is not installed (``what``: who
    needs it, for the message)."""
    missing = [m for m in modules if not _installed(m)]
    if missing:
        raise MissingExtra(
            f"{what} needs the [{extra}] extra (missing: {', '.join(missing)}): "
            f"pip install 'multiturn-envs[{extra}]'"
        )
