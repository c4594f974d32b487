"""Hypothesis: no action raises, changes the gold result, or scores outside [0, 1]."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from multiturn_envs.envs.intercode_sql import InterCodeSQLEnv

TASK = "bundled/shop/019"
FRAGMENTS = [
    "SELECT", "*", "FROM", "orders", "customers", "order_items", "WHERE", "DELETE", "DROP TABLE",
    "UPDATE", "SET", "status", "=", "'cancelled'", "INSERT INTO", "VALUES", "(1)", ";", "ATTACH",
    "'x.db'", "AS", "PRAGMA", "VACUUM INTO", "SHOW TABLES", "DESC", "USE", "submit", "```sql",
    "```", "\n", "count(*)", "GROUP BY", "LIMIT", "1,", "2", "random()", "load_extension('a')",
    "CREATE TABLE t(x)", "ALTER TABLE orders RENAME TO o", "BEGIN", "ROLLBACK", "\x00", "é",
]  # fmt: skip
sqlish = st.lists(st.sampled_from(FRAGMENTS), min_size=1, max_size=8).map(" ".join)
actions = st.one_of(st.text(max_size=60), sqlish)

_ENV = InterCodeSQLEnv(max_turns=None, end_on_success=False)


@settings(max_examples=60)
@given(st.lists(actions, min_size=1, max_size=4), st.sampled_from(["exact", "intercode"]))
def test_any_actions_are_safe(sequence: list[str], mode: str) -> None:
    env = _ENV
    env.scoring = mode
    env.reset(seed=0, options={"task_id": TASK})
    gold = list(env.gold_result().rows or [])
    for action in sequence:
        if env.done:
            break
        obs, reward, _, _, info = env.step(action)
        assert isinstance(obs, str) and obs
        assert 0.0 <= info["step_score"] <= 1.0 and 0.0 <= reward <= 1.0
        assert 0.0 <= info["score_exact"] <= 1.0 and 0.0 <= info["score_intercode"] <= 1.0
    assert list(env.gold_result().rows or []) == gold
    fresh = env._catalog.pristine("shop").execute(env.task().gold)
    assert fresh.rows == gold
