"""A run's fingerprint: what must match for two training runs to give the same digits."""

from __future__ import annotations

import importlib.util
import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from multiturn_envs.rl.fingerprint import (
    FLOAT_PATH_VARIABLES,
    PACKAGES,
    config_digest,
    run_fingerprint,
)
from multiturn_envs.testing import require

CONFIGS = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**6), 10**6) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=12,
)


@settings(max_examples=60)
@given(st.dictionaries(st.text(max_size=6), CONFIGS, max_size=6))
def test_the_digest_ignores_key_order_and_sees_every_value(config: dict[str, Any]) -> None:
    reordered = dict(reversed(list(config.items())))
    assert config_digest(config) == config_digest(reordered)
    assert len(config_digest(config)) == 16
    changed = {**config, "__other__": 1}
    assert config_digest(changed) != config_digest(config)


def test_a_digest_refuses_what_json_cannot_say_exactly() -> None:
    with pytest.raises(ValueError):
        config_digest({"lr": math.nan})
    with pytest.raises(TypeError):
        config_digest({"path": object()})


def test_the_fingerprint_names_the_float_path_and_versions(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    require(importlib.util.find_spec("torch") is not None, "the Python package 'torch'")
    import torch

    for name in FLOAT_PATH_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")
    found = run_fingerprint({"b": 2, "a": 1}, seed=7)
    assert found["config_digest"] == config_digest({"a": 1, "b": 2})
    assert found["seed"] == 7
    assert found["float_path_env"] == {"ATEN_CPU_CAPABILITY": "avx2"}  # only what is set
    # torch reads the variable once, at import: the capability is the one in force
    assert found["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert found["threads"] == torch.get_num_threads()
    assert set(found["packages"]) == set(PACKAGES)
    assert found["packages"]["torch"] == torch.__version__
    assert found["cpu"] and found["machine"]
    json.dumps(found)  # JSON-ready as it is
