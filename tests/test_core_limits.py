"""TextEnv's universal limits: over-long replies refused unread, a bounded message history."""

from __future__ import annotations

from multiturn_envs.core import MAX_ACTION_CHARS, StepOutcome
from multiturn_envs.testing import GuessEnv


class _CountingGuess(GuessEnv):
    """GuessEnv that counts the replies its parser saw."""

    def __init__(self, max_turns: int | None = 6) -> None:
        super().__init__(max_turns=max_turns)
        self.parsed = 0

    def _step(self, action: str) -> StepOutcome:
        self.parsed += 1
        return super()._step(action)


def test_an_over_long_reply_is_refused_before_the_env_parses_it() -> None:
    """Limit: max_action_chars (1,000,000): a turn spent, a clear message, the episode goes on."""
    env = _CountingGuess(max_turns=3)
    env.reset(options={"task_id": "secret-5"})
    obs, reward, terminated, truncated, info = env.step("guess 5" + " " * MAX_ACTION_CHARS)
    assert env.parsed == 0
    assert "1,000,007 characters long" in obs and "at most 1,000,000" in obs
    assert info["parse_error"] and info["error_message"] == obs and info["turn"] == 1
    assert (reward, terminated, truncated) == (0.0, False, False)
    assert env.score_action("x" * (MAX_ACTION_CHARS + 1)) == 0.0 and env.parsed == 0
    _, reward, terminated, _, _ = env.step("guess 5")
    assert terminated and reward == 1.0


def test_the_action_cap_is_an_instance_setting() -> None:
    """Limit: max_action_chars is changed per env instance."""
    env = _CountingGuess()
    env.max_action_chars = 10
    env.reset(options={"task_id": "secret-5"})
    assert "at most 10 characters" in env.step("guess 5 please")[0] and env.parsed == 0
    assert env.step("guess 5")[4]["success"]


def test_history_keeps_the_task_and_the_latest_turns_within_its_bound() -> None:
    """Limit: max_history_chars: past it the oldest turns after the first observation go."""
    env = _CountingGuess(max_turns=None)
    env.max_history_chars = 2_000
    first, _ = env.reset(options={"task_id": "secret-15"})
    for i in range(200):
        env.step(f"guess 0 {'x' * i}")  # unparseable: the episode goes on
    messages = env.messages()
    assert messages[0] == {"role": "user", "content": first}
    assert [m["role"] for m in messages[1:3]] == ["assistant", "user"]
    assert sum(len(m["content"]) for m in messages) <= 2_000
    assert messages[-2]["content"] == f"guess 0 {'x' * 199}"
    assert env.dropped_messages == 2 * 200 + 1 - len(messages)
    state = env.get_state()
    env.step("guess 1")
    env.set_state(state)
    assert env.messages() == messages
