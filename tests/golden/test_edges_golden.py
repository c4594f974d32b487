"""The episode kit (issue 33) changed no number and no byte at the edges where users meet us.

``edges.json`` was written by this module (``python tests/golden/test_edges_golden.py``) with
the code of commit adc80ef, before the edges shared one episode kit: the row and payload
readers of the TRL, SkyRL, verl and verifiers adapters and of the server's session, their four
episode recorders, the training stack's view of a run and the harness's records. Each test
here plays the same scripted episodes with today's code through the same public surfaces and
compares what comes out (observations, rewards paid, per-turn credits, every inspection
property, verl's tokens and ``extra_fields``, verifiers' trace dict, SkyRL's metrics, the
server's payloads, the GRPO rows, system prompt and tool schemas, the harness's records) as
canonical JSON: equal, byte for byte. Regenerate only for a change that means to move a number,
and say so in its commit.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import tempfile
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import multiturn_envs  # noqa: F401  (registers the MT/* ids)
from multiturn_envs.testing import GuessEnv, require_packages

HERE = Path(__file__).resolve().parent
GOLDEN_FILE = HERE / "edges.json"
JUNK = ["", "jump", "<answer>Sideways</answer>", "guess 99", "Left", "<answer>Down</answer>"]


def canonical(value: Any) -> str:
    """What is compared: JSON with sorted keys (floats round-trip exactly)."""
    return json.dumps(value, sort_keys=True, default=repr)


def _need(*names: str) -> None:
    require_packages(*names)


def _expert_or_junk(base: Any, rng: np.random.Generator) -> str:
    if rng.random() < 0.85:
        with contextlib.suppress(Exception):
            return str(base.expert_action())
    return JUNK[int(rng.integers(len(JUNK)))]


# ---------------------------------------------------------------------------- TRL
TRL_ROWS = [
    {"task_id": "4x4", "seed": 3},
    {"task_id": "random-s3-p0.8-n1", "seed": 11, "max_turns": 3},
    {"task_id": "random-s4-p0.8-n2", "seed": 5, "max_turns": 5, "budget_mode": "announced"},
]
TRL_REWARDS: list[tuple[str, dict[str, Any]]] = [
    ("outcome", {}),
    ("process", {"step_weight": 0.3}),
    ("success", {}),
    ("return", {}),
]


def trl_figures(e: Any) -> dict[str, Any]:
    return {
        "reward": e.get_reward(),
        "turns": e.turns,
        "turn_rewards": e.turn_rewards,
        "step_scores": e.step_scores,
        "mean_step_score": e.mean_step_score,
        "step_credits": e.step_credits,
        "process_score": e.process_score,
        "calls": e.calls,
        "done": e.done,
        "success": e.success,
        "infos": e.infos,
        "messages": e.messages,
    }


def trl_act(seed: int) -> list[dict[str, Any]]:
    from multiturn_envs.adapters.trl import TRLEnvironment

    out = []
    for r, row in enumerate(TRL_ROWS):
        for name, kwargs in TRL_REWARDS:
            slippery = bool(r == 2)
            e = TRLEnvironment(
                "MT/FrozenLake-v0", reward=name, max_turns=6, is_slippery=slippery, **kwargs
            )
            rng = np.random.default_rng([seed, r, len(name)])
            texts = [e.reset(**row, prompt=[{"role": "user", "content": ""}])]
            for _ in range(int(rng.integers(1, 9))):
                texts.append(e.act(_expert_or_junk(e.env.unwrapped, rng)))
            out.append({"row": row, "reward": name, "texts": texts, **trl_figures(e)})
            e.env.close()
    return out


def trl_typed(seed: int) -> list[dict[str, Any]]:
    from multiturn_envs.adapters.trl import environment_factories, environment_factory

    out = []
    make = environment_factory(
        "MT/FrozenLake-v0", tools="env", reward="process", max_turns=4, is_slippery=False
    )
    e = make()
    rng = np.random.default_rng(seed)
    for row in TRL_ROWS:
        texts = [e.reset(**row)]
        for _ in range(int(rng.integers(1, 7))):
            base = e.env.unwrapped
            if rng.random() < 0.7 and not base.done:
                call = base.as_tool_call(base.expert_action())
                texts.append(getattr(e, call.name)(**call.arguments))
            else:
                texts.append(e.move(direction=["Left", "North", "Down"][int(rng.integers(3))]))
        out.append({"class": type(e).__name__, "row": row, "texts": texts, **trl_figures(e)})
    e.env.close()
    factories, environment_of = environment_factories(
        "MT/BFCL-v0", [f"multi_turn_base_{i}" for i in range(3)]
    )
    out.append({"factories": sorted(factories), "environment_of": environment_of})
    return out


def trl_rows() -> list[Any]:
    from multiturn_envs.adapters.trl import grpo_rows

    return [
        grpo_rows("MT/FrozenLake-v0", ["4x4", "8x8"], budgets=[3, None], max_turns=6),
        grpo_rows("MT/FrozenLake-v0", ["4x4"], tools="env", seeds=[9]),
        grpo_rows(GuessEnv(), ["secret-3"], system_prompt="be brief"),
    ]


# ---------------------------------------------------------------------------- SkyRL
def skyrl(seed: int) -> list[dict[str, Any]]:
    from multiturn_envs.adapters.skyrl import MTSkyRLEnv

    cases: list[tuple[dict[str, Any], dict[str, Any]]] = [
        ({"task_id": "4x4", "seed": 1, "mt_max_turns": 4}, {"step_score_weight": 0.3}),
        ({"task_id": "8x8", "seed": 2, "budget_mode": "announced"}, {"reward": "process"}),
        ({"task_id": "4x4", "seed": 3, "mt_max_turns": 3}, {"tools": True}),
        (
            {"task_id": "random-s3-p0.8-n0", "seed": 4, "tools": True},
            {"reward": {"name": "process", "weight": 0.2}},
        ),
    ]
    out = []
    for c, (extras, kwargs) in enumerate(cases):
        env = MTSkyRLEnv(
            {},
            extras,
            env_id="MT/FrozenLake-v0",
            env_kwargs={"max_turns": 6, "is_slippery": c == 1},
            **kwargs,
        )
        prompt: list[dict[str, str]] = (
            [] if c % 2 else [{"role": "system", "content": "S"}, {"role": "user", "content": ""}]
        )
        conversation, info = env.init(prompt)
        rng = np.random.default_rng([seed, c])
        steps = []
        for _ in range(8):
            base = env.base
            text = _expert_or_junk(base, rng)
            if env.tools and rng.random() < 0.85:
                call = base.as_tool_call(text)
                text = call.text() if call is not None else "no call at all"
            step = env.step(text)
            steps.append(dict(step))
            if step["done"]:
                break
        out.append(
            {
                "extras": extras,
                "max_turns": env.max_turns,
                "conversation": conversation,
                "info": info,
                "steps": steps,
                "metrics": env.get_metrics(),
            }
        )
        env.close()
    return out


# ---------------------------------------------------------------------------- verl
class ScriptedModel:
    """verl's ``generate`` answered from a script: each reply's text, encoded by the tokenizer
    (expert moves, junk, replies without a call), so an episode is fixed by its seed."""

    def __init__(self, tokenizer: Any, env: Any, rng: np.random.Generator, tools: bool) -> None:
        self.tokenizer, self.env, self.rng, self.tools = tokenizer, env, rng, tools

    async def __call__(self, prompt_ids: list[int], seed: int) -> tuple[list[int], Any]:
        base = self.env.unwrapped
        text = _expert_or_junk(base, self.rng)
        if self.tools and self.rng.random() < 0.85 and not base.done:
            call = base.as_tool_call(text)
            text = call.text() if call is not None else "no call"
        ids = list(self.tokenizer.encode(text, add_special_tokens=False))
        return ids, [-0.5] * len(ids)


def verl(seed: int, tokenizer: Any) -> list[dict[str, Any]]:
    from multiturn_envs.adapters.verl import run_episode

    cases: list[dict[str, Any]] = [
        {"task_id": "4x4", "seed": 1, "max_turns": 4},
        {"task_id": "8x8", "seed": 2, "reward": "process", "max_assistant_turns": 3},
        {"task_id": "4x4", "seed": 3, "tools": True, "reward": {"name": "process", "weight": 1}},
        {"task_id": "random-s3-p0.8-n0", "seed": 4, "response_length": 40},
        {"task_id": "random-s3-p0.8-n1", "seed": 5, "max_user_turns": 2, "tools": True},
    ]
    out = []
    for c, case in enumerate(cases):
        env = gym.make(
            "MT/FrozenLake-v0", max_turns=6, is_slippery=c == 3, disable_env_checker=True
        )
        model = ScriptedModel(tokenizer, env, np.random.default_rng([seed, c]), case.get("tools"))
        tokens = asyncio.run(run_episode(env, tokenizer, model, **case))
        out.append({"case": case, **tokens.__dict__})
        env.close()
    return out


# ---------------------------------------------------------------------------- verifiers
class _Segment:
    def __init__(self, reply: str, terminated: bool) -> None:
        self.last_reply, self.terminated, self.messages = reply, terminated, []


class _Trace:
    def __init__(self) -> None:
        self.info: dict[str, Any] = {}


class _Interaction:
    """The part of verifiers' ``interaction`` that ``MTEnv.run`` uses, answered from a script
    (a model server and verifiers' harness are what test_verifiers.py runs for real)."""

    def __init__(self, replies: list[str], cap: int) -> None:
        self.trace, self.replies, self.cap, self.seen = _Trace(), replies, cap, []

    async def turn(self, observation: str) -> _Segment:
        self.seen.append(observation)
        n = len(self.seen)
        return _Segment(self.replies[(n - 1) % len(self.replies)], n > self.cap)


class _Player:
    def __init__(self, interaction: _Interaction) -> None:
        self.interaction_of = interaction

    @contextlib.asynccontextmanager
    async def interaction(self, task: Any) -> Any:
        yield self.interaction_of


class _Agents:
    def __init__(self, interaction: _Interaction) -> None:
        self.player = _Player(interaction)


def verifiers(seed: int) -> list[dict[str, Any]]:
    from multiturn_envs.adapters.verifiers import (
        MTEnv,
        MTRewardTask,
        MTTask,
        MTTaskset,
        MTTasksetConfig,
    )

    out: list[dict[str, Any]] = []
    configs = [
        MTTasksetConfig(num_tasks=2, seeds=[0, 1], max_turns=3),
        MTTasksetConfig(
            tasks=["4x4"],
            seeds=[seed],
            max_turns=8,
            reward="process",
            env_kwargs={"is_slippery": False},
        ),
        MTTasksetConfig(tasks=["4x4", "8x8"], max_turns=4, tools=True, budget_mode="announced"),
    ]
    replies = [
        ["<answer>Down</answer>", "<answer>Right</answer>", "jump"],
        [f"<answer>{m}</answer>" for m in ("Down", "Down", "Right", "Down", "Right", "Right")],
        ['<tool_call>\n{"name": "move", "arguments": {"direction": "Down"}}\n</tool_call>', "no"],
    ]
    for c, config in enumerate(configs):
        tasks = list(MTTaskset(config).load())
        for t, task in enumerate(tasks):
            interaction = _Interaction(replies[c], cap=[9, 7, 9][c])
            asyncio.run(MTEnv.run(None, task, _Agents(interaction)))  # type: ignore[arg-type]
            cls = MTRewardTask if config.reward else MTTask
            names = ["success", "step_score", "turns", "env_return", "first_success_turn"]
            if config.reward:
                names.append("registered")
            values = {n: asyncio.run(getattr(cls, n)(task, interaction.trace)) for n in names}
            out.append(
                {
                    # error_after is new since the golden file (issue 33): not compared
                    "data": task.data.model_dump(mode="json", exclude={"error_after"}),
                    "task": t,
                    "seen": interaction.seen,
                    "trace": interaction.trace.info,
                    "values": values,
                }
            )
    return out


# ---------------------------------------------------------------------------- server session
def session(seed: int) -> list[Any]:
    from multiturn_envs.server import protocol as p
    from multiturn_envs.server.session import EnvSession

    out: list[Any] = []
    env = gym.make("MT/FrozenLake-v0", max_turns=5, is_slippery=False, disable_env_checker=True)
    s = EnvSession(env, "MT/FrozenLake-v0", p.ServerLimits(), salt=b"golden-salt-0000")
    rng = np.random.default_rng(seed)
    resets: list[dict[str, Any]] = [
        {"task_id": "4x4"},
        {"task_id": "8x8", "seed": 4, "max_turns": 3, "reward": "process"},
        {"seed": 7, "task_id": "4x4", "budget_mode": "announced", "reward": "success", "x": 1},
        {"task_id": "4x4", "seed": 2, "expert_in_metadata": True, "options": {"max_turns": 4}},
    ]
    for data in resets:
        s.seq += 1
        out.append(s.reset(dict(data)))
        for _ in range(7):
            s.seq += 1
            if s.base.done:
                break
            if rng.random() < 0.2:
                out.append(s.step({"type": "call_tool", "tool_name": "move", "arguments": {}}))
            else:
                out.append(s.step({"text": _expert_or_junk(s.base, rng)}))
        out.append(s.state())
    for bad in ({"seed": -1}, {"max_turns": 0}, {"reward": "nope"}, {"options": 3}):
        try:
            s.reset(dict(bad))
        except p.ProtocolError as exc:
            out.append([exc.code, exc.message])
    s.close()
    return out


# ---------------------------------------------------------------------------- training view
TRAIN_CONFIGS: dict[str, dict[str, Any]] = {
    "act_mix": {
        "env_id": "MT/FrozenLake-v0",
        "env_kwargs": {"is_slippery": False},
        "train_tasks": ["random-s3-p0.8-n0", "random-s3-p0.8-n1"],
        "warm_start": "sft",
        "max_turns": 6,
        "budget_mix": [4, 6],
        "reward": "process",
        "step_weight": 0.3,
        "steps": 3,
        "num_generations": 2,
        "batch_size": 4,
    },
    "typed": {
        "env_id": "MT/FrozenLake-v0",
        "warm_start": "format",
        "tools": "env",
        "max_turns": 4,
        "steps": 2,
        "num_generations": 2,
        "batch_size": 2,
        "train_tasks": ["4x4", "8x8"],
    },
    "sql_default_tasks": {
        "env_id": "MT/InterCode-SQL-v0",
        "warm_start": "format",
        "steps": 1,
        "num_generations": 2,
        "batch_size": 2,
        "advantage": "gigpo",
        "gigpo_step_reward": "step_score",
    },
}
"""Configs in the old vocabulary (``step_weight``, ``"step_score"``): they load, warn, and
give the same run."""


def training_view() -> dict[str, Any]:
    """What the training stack sees of each config: asked once (``RunView``), as the old
    ``rollout_env`` functions answered one env at a time. ``to_dict`` is compared apart: the
    saved config's form changed by design (the reward spec)."""
    from transformers.utils import get_json_schema

    from multiturn_envs.rl.config import TrainConfig
    from multiturn_envs.rl.run_view import RunView
    from multiturn_envs.rl.training import grpo_settings, train_rows

    out: dict[str, Any] = {}
    for name, data in TRAIN_CONFIGS.items():
        config = TrainConfig.from_dict(data)
        view = RunView.of(config)
        out[name] = {
            "reward": config.make_reward().spec(),
            "step_reward": config.make_step_reward().spec(),
            "tasks_head": list(view.tasks[:5]),
            "tasks": len(view.tasks),
            "system_prompt": view.system_prompt,
            "layout": [t.openai() for t in view.layout.tools],
            "class_tools": sorted(n for n in vars(view.environment_class) if not n.startswith("_")),
            "schemas": [get_json_schema(f) for f in view.tool_functions()],
            "rows": train_rows(config, view),
            "settings": grpo_settings(config),
        }
    return out


# ---------------------------------------------------------------------------- harness records
def records() -> list[Any]:
    from multiturn_envs.harness import EvalConfig, eval_records
    from multiturn_envs.policies import ExpertPolicy, NoisyExpertPolicy, RandomPolicy

    runs: list[tuple[EvalConfig, Any]] = [
        (
            EvalConfig(
                env_id="MT/FrozenLake-v0", policy="random", tasks=["4x4", "8x8"], samples=2,
                max_turns=5, seed=3,
            ),
            RandomPolicy(),
        ),
        (
            EvalConfig(
                env_id="MT/FrozenLake-v0", policy="noisy-expert:0.2", tasks=["4x4", "8x8"],
                samples=2, max_turns=16, seed=5, env_kwargs={"is_slippery": False},
            ),
            NoisyExpertPolicy(0.2),
        ),
        (
            EvalConfig(
                env_id="MT/FrozenLake-v0", policy="noisy-expert:0.3", tasks=["4x4"], samples=3,
                max_turns=6, seed=1, error_after=1, budget_mode="announced",
                env_kwargs={"is_slippery": True},
            ),
            NoisyExpertPolicy(0.3),
        ),
        (
            EvalConfig(
                env_id="MT/BFCL-v0", policy="expert", tasks=["multi_turn_base_0"], samples=1,
                max_turns=8, seed=0,
            ),
            ExpertPolicy(),
        ),
    ]  # fmt: skip
    out = []
    for config, policy in runs:
        for record in eval_records(config, policy, progress=False):
            kept = {k: v for k, v in record.items() if k not in ("run_id", "timings")}
            out.append(kept)
    return out


# ---------------------------------------------------------------------------- the file
def _tokenizer() -> Any:
    from multiturn_envs.rl.tiny_lm import build_tiny_chat_model, load_tiny_chat_model

    folder = Path(sys.argv[2] if len(sys.argv) > 2 else "/tmp/golden-tiny")
    return load_tiny_chat_model(build_tiny_chat_model(folder))[1]


SECTIONS: dict[str, Callable[[], Any]] = {
    "trl_act": lambda: trl_act(0),
    "trl_typed": lambda: trl_typed(1),
    "trl_rows": trl_rows,
    "skyrl": lambda: skyrl(2),
    "verifiers": lambda: verifiers(3),
    "session": lambda: session(4),
    "training_view": training_view,
    "records": records,
}


@pytest.fixture(scope="module")
def golden() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(GOLDEN_FILE.read_text(encoding="utf-8"))
    return data


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        yield


@pytest.mark.parametrize("section", sorted(SECTIONS))
def test_an_edge_gives_what_it_gave(section: str, golden: dict[str, Any]) -> None:
    if section in ("trl_act", "trl_typed", "trl_rows", "training_view"):
        _need("trl", "transformers")
    _need({"skyrl": "skyrl_gym", "verifiers": "verifiers"}.get(section, "gymnasium"))
    with _quiet():
        got = SECTIONS[section]()
    want = golden[section]
    if section == "training_view":  # the saved config's form changed by design: apart
        want = {k: {f: v for f, v in c.items() if f != "to_dict"} for k, c in want.items()}
    if section == "records":  # schema 2 (issue 32) added tokens per turn: the rest is as it was
        got = [_schema_1(record) for record in got]
    assert canonical(got) == canonical(want)


TOKEN_FIELDS = ("prompt_tokens", "completion_tokens")


def _schema_1(record: dict[str, Any]) -> dict[str, Any]:
    """A schema-2 record as schema 1 wrote it, once its tokens are checked: the scripted
    baselines of :func:`records` spend none, and each turn says so."""
    assert record["schema"] == 2
    assert all(record[field] == [0] * record["turns"] for field in TOKEN_FIELDS), record
    assert record["stop_tokens"] is None and not record["agent_stopped"]  # none stops
    dropped = (*TOKEN_FIELDS, "stop_tokens")
    return {**{k: v for k, v in record.items() if k not in dropped}, "schema": 1}


def test_an_old_saved_config_is_the_same_run_as_its_old_file() -> None:
    """``train_config.json`` now holds the reward as a spec; a folder saved before (its
    ``step_weight``, its old names) still holds the same run (what resume asks)."""
    from multiturn_envs.rl.config import TrainConfig

    golden = json.loads(GOLDEN_FILE.read_text(encoding="utf-8"))["training_view"]
    for name, data in TRAIN_CONFIGS.items():
        with pytest.deprecated_call():
            saved = TrainConfig.from_dict(golden[name]["to_dict"])
            given = TrainConfig.from_dict(data)
        assert saved == given
        assert saved.make_reward().spec() == golden[name]["reward"]


@pytest.mark.timeout(600)
def test_verl_episodes_give_the_tokens_and_fields_they_gave(
    golden: dict[str, Any], tmp_path: Path
) -> None:
    _need("torch", "transformers")
    from multiturn_envs.rl.tiny_lm import build_tiny_chat_model, load_tiny_chat_model

    tokenizer = load_tiny_chat_model(build_tiny_chat_model(tmp_path / "tiny"))[1]
    assert canonical(verl(5, tokenizer)) == canonical(golden["verl"])


TRAIN = {
    "env_id": "MT/FrozenLake-v0",
    "env_kwargs": {"is_slippery": False},
    "train_tasks": ["random-s3-p0.8-n0", "random-s3-p0.8-n1", "random-s3-p0.8-n2"],
    "model": "tiny",
    "warm_start": "sft",
    "sft_episodes": 16,
    "sft_steps": 40,
    "max_turns": 6,
    "budget_mix": [4, 5, 6],
    "reward": "process",
    "step_weight": 0.3,
    "steps": 2,
    "num_generations": 2,
    "batch_size": 4,
    "learning_rate": 0.0005,
    "max_completion_length": 256,
    "max_turn_tokens": 24,
    "threads": 1,
}
"""A shrunk run of examples/train/frozenlake-budgetmix.json: SFT warm start, two GRPO steps."""


def train_log(folder: Path) -> list[dict[str, Any]]:
    from multiturn_envs.rl.config import TrainConfig
    from multiturn_envs.rl.training import train

    config = TrainConfig.from_dict({**TRAIN, "output_dir": str(folder)})
    log = train(config, progress=False).log
    return [{k: v for k, v in entry.items() if k != "step_time"} for entry in log]


@pytest.mark.timeout(1200)
def test_a_shrunk_training_run_logs_what_it_logged(golden: dict[str, Any], tmp_path: Path) -> None:
    """Rollouts, rewards paid, advantages and the update: the per-step log of a seeded run."""
    _need("trl", "torch", "transformers")
    with _quiet():
        got = train_log(tmp_path / "run")
    assert canonical(got) == canonical(golden["train_log"])


def _write() -> None:  # pragma: no cover - run by hand against the code to freeze
    data = {name: json.loads(canonical(make())) for name, make in SECTIONS.items()}
    data["verl"] = json.loads(canonical(verl(5, _tokenizer())))
    data["train_log"] = json.loads(canonical(train_log(Path(tempfile.mkdtemp()))))
    GOLDEN_FILE.write_text(json.dumps(data, sort_keys=True, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {GOLDEN_FILE} ({GOLDEN_FILE.stat().st_size:,} bytes)")


if __name__ == "__main__" and sys.argv[1:2] == ["write"]:
    _write()
