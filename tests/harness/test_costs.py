"""Tokens and cost in the report: summed from the records, priced from a table the user gives
(read within bounds, every field checked)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from multiturn_envs.cli import main
from multiturn_envs.errors import UntrustedInputError
from multiturn_envs.harness import EvalConfig, main_report, read_run, run_eval
from multiturn_envs.harness.costs import (
    Price,
    PriceTable,
    format_costs,
    load_price_table,
    run_tokens,
)
from multiturn_envs.policies import Reply, TokenUsage, TurnRequest

ICE = {"is_slippery": False}


class Metered:
    """The expert on odd samples, a wall-walker on even ones; 100 + 10 tokens a turn."""

    name = "metered"

    def act(self, requests: Sequence[TurnRequest]) -> list[Reply]:
        out = []
        for r in requests:
            sample = int(r.episode_id.split("/")[1])
            action = r.live_env().expert_action() if sample % 2 else "Left"
            out.append(Reply(action, usage=TokenUsage(100, 10)))
        return out


@pytest.fixture(scope="module")
def metered_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("runs") / "metered.jsonl"
    config = EvalConfig("MT/FrozenLake-v0", "metered", ["4x4"], 4, 8, env_kwargs=ICE)
    run_eval(config, Metered(), str(out), progress=False)
    return out


def test_tokens_and_cost_per_episode_and_per_success(metered_run: Path, tmp_path: Path) -> None:
    run = read_run(metered_run)
    tokens = run_tokens("metered", run.records)
    turns = sum(r["turns"] for r in run.records)
    assert (tokens.episodes, tokens.counted, tokens.successes) == (4, 4, 2)
    assert (tokens.prompt, tokens.completion) == (100 * turns, 10 * turns)
    prices = tmp_path / "prices.json"
    prices.write_text(
        '{"currency": "EUR", "per_tokens": 1000, "models": {"metered": '
        '{"prompt": 0.5, "completion": 2}, "*": {"prompt": 9, "completion": 9}}}',
        encoding="utf-8",
    )
    table = load_price_table(prices)
    total = (100 * turns * 0.5 + 10 * turns * 2) / 1000
    assert math.isclose(table.cost("metered", tokens.prompt, tokens.completion) or 0, total)
    text = main_report([str(metered_run)], n_boot=0, plots=False, prices=str(prices))
    assert f"{total:.4g} in all" in text
    assert f"{total / 4:.4g} per episode" in text
    assert f"{total / 2:.4g} per success (2 successes)" in text
    assert "Cost in EUR (per 1,000 tokens: prompt 0.5, completion 2)" in text
    assert main(["report", str(metered_run), "--no-plots", "--prices", str(prices)]) == 0


def test_a_policy_without_a_price_and_records_without_tokens(metered_run: Path) -> None:
    run = read_run(metered_run)
    table = PriceTable({"other": Price(1, 1)}, source="p.json")
    text = format_costs(run_tokens("metered", run.records), table)
    assert "has no price for 'metered'" in text
    old = Path(__file__).parent / "data" / "v1_random_error_after.jsonl"
    report = main_report([str(old)], n_boot=0, plots=False)
    assert "Tokens: the policy reported none" in report


@given(
    prompt=st.lists(st.integers(0, 10**6), min_size=1, max_size=8),
    price=st.floats(0, 1e3, allow_nan=False),
)
@settings(max_examples=100, deadline=None)
def test_cost_is_linear_in_the_tokens(prompt: list[int], price: float) -> None:
    table = PriceTable({"*": Price(price, 2 * price)}, per_tokens=1000)
    records = [
        {"actions": ["a"] * len(prompt), "prompt_tokens": prompt, "completion_tokens": prompt}
    ]
    tokens = run_tokens("p", records)
    assert tokens.prompt == tokens.completion == sum(prompt)
    cost = table.cost("p", tokens.prompt, tokens.completion) or 0.0
    assert math.isclose(cost, 3 * price * sum(prompt) / 1000, rel_tol=1e-9, abs_tol=1e-12)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"models": {"*": {"prompt": -1, "completion": 1}}}', "at least 0"),
        ('{"models": {"*": {"prompt": 1e400, "completion": 1}}}', "number"),
        ('{"models": {"*": {"prompt": "1", "completion": 1}}}', "number"),
        ('{"models": {"*": {"prompt": true, "completion": 1}}}', "number"),
        ('{"models": {"*": {"prompt": 1}}}', "completion is missing"),
        ('{"models": {"*": {"prompt": 1, "completion": 1, "cached": 2}}}', "unknown key"),
        ('{"models": {}}', "empty"),
        ('{"models": [1, 2]}', "table"),
        ('{"modles": {"*": {"prompt": 1, "completion": 1}}}', "unknown key"),
        ('{"per_tokens": 0, "models": {"*": {"prompt": 1, "completion": 1}}}', "whole number"),
        (
            '{"currency": "' + "X" * 40 + '", "models": {"*": {"prompt": 1, "completion": 1}}}',
            "long",
        ),
        ("[1, 2, 3]", "table"),
        ("{" * 200 + "}" * 200, "deep"),
        ("not json", "JSON"),
    ],
)
def test_a_bad_price_table_is_refused_with_file_and_field(
    tmp_path: Path, text: str, message: str
) -> None:
    path = tmp_path / "prices.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(UntrustedInputError, match=message) as info:
        load_price_table(path)
    assert str(path) in str(info.value)


def test_price_tables_in_toml_and_yaml_and_the_cli_refusals(
    metered_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    toml = tmp_path / "p.toml"
    toml.write_text('currency = "USD"\n[models."*"]\nprompt = 1\ncompletion = 2\n', "utf-8")
    yaml = tmp_path / "p.yaml"
    yaml.write_text("models:\n  metered: {prompt: 1, completion: 2}\n", encoding="utf-8")
    for path in (toml, yaml):
        assert load_price_table(path).price_of("metered") == Price(1.0, 2.0)
    big = tmp_path / "big.json"
    big.write_bytes(b" " * (2 << 20))
    fifo = tmp_path / "fifo.json"
    os_mkfifo(fifo)
    for bad in (big, fifo, tmp_path / "missing.json", tmp_path):
        capsys.readouterr()
        assert main(["report", str(metered_run), "--no-plots", "--prices", str(bad)]) == 2
        assert capsys.readouterr().err.count("\n") == 1


def os_mkfifo(path: Path) -> Any:
    import os

    return os.mkfifo(path)
