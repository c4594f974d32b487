"""MT/BFCL-v0 on BFCL's real data (bfcl-eval installed with --no-deps): replay, controls, fidelity.

These run whenever bfcl-eval is installed and fail (never skip) under CI=true without it.
"""

from __future__ import annotations

import collections
import importlib
import json
import sys
import types

import numpy as np
import pytest

from multiturn_envs.envs.bfcl.ast_checker import check_single_turn
from multiturn_envs.envs.bfcl.calls import Call
from multiturn_envs.envs.bfcl.data import MULTI_TURN_CATEGORIES, SINGLE_TURN_CATEGORIES
from multiturn_envs.envs.bfcl.env import BFCLEnv
from multiturn_envs.envs.bfcl.multi_turn import END_OF_TURN_REPLY
from multiturn_envs.envs.bfcl.single_turn import expert_calls

pytestmark = pytest.mark.usefixtures("needs_bfcl_eval")


def _replay(env: BFCLEnv, task_id: str, turns: list[list[str]]) -> tuple[bool, str | None]:
    env.reset(seed=0, options={"task_id": task_id})
    info: dict = {}
    for calls in turns:
        if env.done:
            break
        if calls:
            env.step("[" + ", ".join(calls) + "]")
        if not env.done:
            *_, info = env.step(END_OF_TURN_REPLY)
    return bool(env.current_info()["success"]) and env.done, info.get("turn_error_type")


@pytest.mark.parametrize("category", MULTI_TURN_CATEGORIES)
def test_expert_replay_passes_every_entry(category: str) -> None:
    env = BFCLEnv(category=category, source="bfcl-eval", max_turns=None)
    assert len(env.task_ids()) == 200
    failures = []
    for task_id in env.task_ids():
        env.reset(seed=0, options={"task_id": task_id})
        while not env.done:
            obs, *_, info = env.step(env.expert_action())
            assert info["step_score"] == 1.0, (task_id, obs[:200])
            assert info["data_version"] == "bfcl-eval==2026.3.23"
        if not info["success"]:
            failures.append(task_id)
    assert failures == []


def test_dropping_the_last_ground_truth_call_fails_every_base_entry() -> None:
    env = BFCLEnv(category="multi_turn_base", source="bfcl-eval", max_turns=None)
    reasons: collections.Counter[str | None] = collections.Counter()
    for task_id in env.task_ids():
        gt = [list(t) for t in env.entry(task_id).ground_truth]
        last = max(i for i, t in enumerate(gt) if t)
        gt[last].pop()
        passed, reason = _replay(env, task_id, gt)
        assert not passed, task_id
        reasons[reason] += 1
    assert sum(reasons.values()) == 200


def test_error_actions_score_below_one_on_real_entries() -> None:
    env = BFCLEnv(category="multi_turn", source="bfcl-eval", max_turns=None)
    rng = np.random.default_rng(0)
    for task_id in env.task_ids()[::20]:
        env.reset(seed=0, options={"task_id": task_id})
        while not env.done:
            error = env.error_action(rng)
            assert env.score_action(error) < 1.0, (task_id, error)
            env.step(env.expert_action())


def _bfcl_ast_checker():
    """BFCL's own ast_checker, importable once its model registry is stubbed (notes, sec. 9)."""
    name = "bfcl_eval.constants.model_config"
    if name not in sys.modules:
        module = types.ModuleType(name)

        class _Any(dict):
            def __missing__(self, key: str) -> types.SimpleNamespace:
                return types.SimpleNamespace(underscore_to_dot=False)

        module.MODEL_CONFIG_MAPPING = _Any()
        sys.modules[name] = module
    checker = importlib.import_module("bfcl_eval.eval_checker.ast_eval.ast_checker")
    enums = importlib.import_module("bfcl_eval.constants.enums")
    return checker.ast_checker, enums.Language.PYTHON


def _perturb(calls: list[Call], rng: np.random.Generator) -> list[Call]:
    out = []
    for call in calls:
        kwargs = dict(call.kwargs)
        if kwargs:
            key = list(kwargs)[int(rng.integers(len(kwargs)))]
            value = kwargs[key]
            kind = int(rng.integers(5))
            if kind == 0:
                kwargs.pop(key)
            elif kind == 1:
                kwargs[key] = value + "x" if isinstance(value, str) else str(value)
            elif kind == 2 and isinstance(value, int) and not isinstance(value, bool):
                kwargs[key] = float(value)
            elif kind == 3:
                kwargs["extra_param"] = 1
            elif isinstance(value, str):
                kwargs[key] = value.upper() + " ,"
        out.append(Call(call.name, (), kwargs))
    if len(out) > 1 and rng.random() < 0.2:
        out = out[:-1]
    return out


@pytest.mark.parametrize(
    "category",
    [
        c
        for c in SINGLE_TURN_CATEGORIES
        if c not in ("irrelevance", "live_irrelevance", "live_relevance")
    ],
)
def test_ast_checker_agrees_with_bfcl_on_real_entries(category: str) -> None:
    ast_checker, python = _bfcl_ast_checker()
    env = BFCLEnv(category=category, source="bfcl-eval", max_turns=1)
    rng = np.random.default_rng(1)
    passed = 0
    for task_id in env.task_ids():
        entry = env.entry(task_id)
        expert = expert_calls(entry)
        for calls in (expert, _perturb(expert, rng), _perturb(expert, rng)):
            mine = check_single_turn(entry.functions, calls, entry.ground_truth, category)
            theirs = ast_checker(
                entry.functions,
                [{c.name: dict(c.kwargs)} for c in calls],
                entry.ground_truth,
                python,
                category,
                "model",
            )
            assert mine.valid == theirs["valid"], (task_id, calls, theirs)
        passed += check_single_turn(entry.functions, expert, entry.ground_truth, category).valid
    # The expert takes each parameter's first allowed option; a few entries' first options
    # contradict their own schema (measured: at most 5 per category).
    assert passed >= len(env.task_ids()) - 5


def test_multi_turn_verdicts_agree_with_bfcl_checker() -> None:
    """Our verdicts equal BFCL's multi_turn_checker's on GT and on corrupted GT replays."""
    checker = importlib.import_module(
        "bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker"
    ).multi_turn_checker
    env = BFCLEnv(category="multi_turn_base", source="bfcl-eval", max_turns=None)
    for n, task_id in enumerate(env.task_ids()[::10]):
        entry = env.entry(task_id)
        variants = [[list(t) for t in entry.ground_truth]]
        dropped = [list(t) for t in entry.ground_truth]
        first = min(i for i, t in enumerate(dropped) if t)
        dropped[first].pop(0)
        variants.append(dropped)
        for v, turns in enumerate(variants):
            mine, _ = _replay(env, task_id, turns)
            raw = json.loads(
                json.dumps(
                    {k: getattr(entry, k) for k in ("id", "initial_config", "involved_classes")}
                )
            )
            theirs = checker(
                [[t] if t else [] for t in turns],
                entry.ground_truth,
                raw,
                entry.category,
                f"crosscheck_{n}_{v}",
            )
            assert mine == theirs["valid"], (task_id, v, theirs.get("error_type"))


def test_long_context_backends_leave_module_state_alone() -> None:
    lc = importlib.import_module(
        "bfcl_eval.eval_checker.multi_turn_eval.func_source_code.long_context"
    )
    before = json.dumps([lc.CREDIT_CARD_EXTENSION, lc.LONG_WEATHER_EXTENSION], default=str)
    env = BFCLEnv(category="multi_turn_long_context", source="bfcl-eval", max_turns=None)
    for task_id in env.task_ids():
        classes = env.entry(task_id).involved_classes
        if "TravelAPI" in classes or "VehicleControlAPI" in classes:
            env.reset(seed=0, options={"task_id": task_id})
            while not env.done:
                env.step(env.expert_action())
            if "VehicleControlAPI" in classes:
                env.reset(seed=0, options={"task_id": task_id})
                env.step("[get_outside_temperature_from_google()]")
    assert json.dumps([lc.CREDIT_CARD_EXTENSION, lc.LONG_WEATHER_EXTENSION], default=str) == before
