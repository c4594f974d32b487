"""Env cards (docs/envs/) and class docstrings must not drift from the constructors.

Every constructor argument of every registered ``MT/*`` env is named in the env's card
(``docs/envs/<name>.md``, where ``MT/InterCode-SQL-v0`` -> ``intercode-sql.md``) and in the class
docstring's ``Arguments`` section, as the Gymnasium docstring convention asks.
"""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path

import gymnasium as gym
import pytest

import multiturn_envs

DOCS = Path(__file__).resolve().parents[1] / "docs" / "envs"


def _env_class(env_id: str) -> type:
    entry = gym.spec(env_id).entry_point
    assert isinstance(entry, str), f"{env_id}: register with a 'module:Class' string"
    module, _, attr = entry.partition(":")
    cls = getattr(importlib.import_module(module), attr)
    assert isinstance(cls, type)
    return cls


def _arguments(cls: type) -> list[str]:
    params = inspect.signature(cls.__init__).parameters.values()  # type: ignore[misc]
    return [
        p.name
        for p in params
        if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]


@pytest.mark.parametrize("env_id", multiturn_envs.env_ids())
def test_every_constructor_argument_is_documented(env_id: str) -> None:
    cls = _env_class(env_id)
    card_name = env_id.split("/", 1)[1].rsplit("-v", 1)[0].lower() + ".md"
    card = (DOCS / card_name).read_text(encoding="utf-8")
    doc = inspect.getdoc(cls) or ""
    assert "Arguments" in doc or "Args" in doc, f"{cls.__name__} has no Arguments section"
    section = doc[doc.find("Arg") :]
    missing_card = [a for a in _arguments(cls) if not re.search(rf"`{a}`|\b{a}\b", card)]
    missing_doc = [a for a in _arguments(cls) if not re.search(rf"\b{a}\b", section)]
    assert missing_card == [], f"docs/envs/{card_name} does not document {missing_card}"
    assert missing_doc == [], f"{cls.__name__}'s docstring does not document {missing_doc}"
