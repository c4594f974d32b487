"""make_env / EnvMaker: the one place the env checker is decided (issue 33)."""

from __future__ import annotations

import pickle

import gymnasium as gym
import pytest

import multiturn_envs  # noqa: F401
from multiturn_envs.episode import EnvMaker, make_env


def test_the_checker_is_off_unless_asked() -> None:
    plain, checked = make_env("MT/FrozenLake-v0"), make_env("MT/FrozenLake-v0", checker=True)
    assert plain.spec is not None and plain.spec.disable_env_checker
    assert checked.spec is not None and not checked.spec.disable_env_checker
    assert not isinstance(plain, gym.wrappers.PassiveEnvChecker)
    kinds = []
    layer = checked
    while isinstance(layer, gym.Wrapper):
        kinds.append(type(layer).__name__)
        layer = layer.env
    assert "PassiveEnvChecker" in kinds
    plain.close()
    checked.close()


def test_a_maker_is_a_value_that_pickles_and_makes_fresh_envs() -> None:
    maker = EnvMaker("MT/FrozenLake-v0", {"max_turns": 3})
    again = pickle.loads(pickle.dumps(maker))
    assert again == maker and again.to_dict() == {
        "env_id": "MT/FrozenLake-v0",
        "env_kwargs": {"max_turns": 3},
        "checker": False,
    }
    a, b = maker(), again()
    assert a is not b and a.unwrapped.default_budget == (3, "hidden")  # type: ignore[attr-defined]
    assert maker.with_kwargs(max_turns=5)().unwrapped.default_budget[0] == 5  # type: ignore[attr-defined]
    a.close()
    b.close()


@pytest.mark.parametrize(
    ("args", "match"),
    [(("",), "env_id must be"), ((3,), "env_id must be"), (("MT/X-v0", [1]), "env_kwargs must")],
)
def test_a_bad_maker_is_refused_at_once(args: tuple[object, ...], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        EnvMaker(*args)  # type: ignore[arg-type]


def test_an_unknown_id_is_gymnasium_s_error() -> None:
    with pytest.raises(gym.error.Error):
        make_env("MT/Nope-v0")
