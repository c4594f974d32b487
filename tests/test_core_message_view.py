"""``TextEnv.message_view``: the messages without copies, and never changed behind a view."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from multiturn_envs.testing import GuessEnv


@settings(max_examples=30, deadline=None)
@given(guesses=st.lists(st.integers(0, 9), min_size=1, max_size=6), restore_at=st.integers(0, 5))
def test_view_equals_messages_and_old_views_stay_valid(guesses: list[int], restore_at: int) -> None:
    env = GuessEnv(max_turns=6)
    env.reset(seed=0, options={"task_id": "secret-12"})  # guesses are 0-9: no early end
    views, copies, snapshots = [env.message_view()], [env.messages()], [env.get_state()]
    for g in guesses:
        env.step(f"guess {g}")
        views.append(env.message_view())
        copies.append(env.messages())
        snapshots.append(env.get_state())
        assert views[-1] == copies[-1]
        assert all(a is b for a, b in zip(views[-2], views[-1]))  # shared, not copied
    env.set_state(snapshots[min(restore_at, len(guesses))])
    env.message_view().append({"role": "user", "content": "a caller's own list"})
    assert views == copies  # no view changed: not by later turns, restores or callers' lists
    assert env.message_view() == copies[min(restore_at, len(guesses))]
