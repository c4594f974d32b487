"""GiGPO advantages against cases computed by hand."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from multiturn_envs.rl import Trajectory, gigpo_advantages
from multiturn_envs.rl.gigpo import discounted_returns


def test_discounted_returns_by_hand() -> None:
    assert discounted_returns([0.0, 0.0, 1.0], 0.5).tolist() == [0.25, 0.5, 1.0]


def test_hand_computed_group() -> None:
    # Two trajectories from state "s0". A: s0 -> s1 -> goal (reward 1 at the end).
    # B: s0 -> s2 (hole, reward 0). gamma = 0.5.
    a = Trajectory(anchors=["s0", "s1"], rewards=[0.0, 1.0])
    b = Trajectory(anchors=["s0"], rewards=[0.0])
    adv = gigpo_advantages([a, b], gamma=0.5, episode_mode="mean_norm", step_mode="mean_norm")
    assert adv.episode == [0.5, -0.5]  # returns 1 and 0, mean 0.5
    # Anchor s0: G = 0.5 (A) and 0.0 (B), mean 0.25. s1 is a singleton -> 0.
    np.testing.assert_allclose(adv.step[0], [0.25, 0.0])
    np.testing.assert_allclose(adv.step[1], [-0.25])
    np.testing.assert_allclose(adv.combined[0], [0.75, 0.5])
    np.testing.assert_allclose(adv.combined[1], [-0.75])


def test_mean_std_norm_and_weight() -> None:
    group = [Trajectory(["x"], [1.0]), Trajectory(["x"], [0.0]), Trajectory(["y"], [0.0])]
    adv = gigpo_advantages(
        group,
        gamma=1.0,
        step_weight=0.5,
        eps=0.0,
        episode_mode="mean_std_norm",
        step_mode="mean_std_norm",
    )
    returns = np.array([1.0, 0.0, 0.0])
    expected = (returns - returns.mean()) / returns.std()
    np.testing.assert_allclose(adv.episode, expected)
    np.testing.assert_allclose([s[0] for s in adv.step], [1.0, -1.0, 0.0])
    np.testing.assert_allclose([c[0] for c in adv.combined], expected + 0.5 * np.array([1, -1, 0]))


@given(
    st.lists(
        st.lists(st.tuples(st.sampled_from("abc"), st.floats(0, 1)), min_size=1, max_size=5),
        min_size=1,
        max_size=6,
    )
)
def test_step_advantages_sum_to_zero_in_each_anchor_group(raw: list) -> None:
    group = [Trajectory([k for k, _ in t], [r for _, r in t]) for t in raw]
    adv = gigpo_advantages(group, step_mode="mean_norm")
    sums: dict[str, float] = {}
    for traj, steps in zip(group, adv.step):
        for key, value in zip(traj.anchors, steps):
            sums[key] = sums.get(key, 0.0) + value
    assert all(abs(v) < 1e-9 for v in sums.values())
    assert abs(sum(adv.episode)) < 1e-6 * len(group) + 1e-9 or len(group) == 1


def test_bad_input() -> None:
    with pytest.raises(ValueError):
        Trajectory(["a"], [1.0, 2.0])
    with pytest.raises(ValueError):
        gigpo_advantages([])
    with pytest.raises(ValueError, match="mode"):
        gigpo_advantages([Trajectory(["a"], [1.0])], step_mode="median")
