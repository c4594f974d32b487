"""The harness against a served env writes the records it writes in-process (``eval --env-url``).

``run_eval(..., make_env=remote_env_factory(url))`` steps ``RemoteTextEnv`` sessions on a real
server process; with the same config and seeds every record must be identical but for
``timings`` and ``run_id``: actions (the random baseline reads ``valid_actions`` or the env's
own ``random_action`` over the wire), rewards, step scores, the env spec, and error injection
(expert and error actions drawn on the server with the client's generator).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest
from test_openenv_client import env_kwargs_for

import multiturn_envs
from multiturn_envs.harness import EvalConfig, run_eval
from multiturn_envs.policies.baselines import baseline_from_name
from multiturn_envs.server.process import ServerProcess
from multiturn_envs.server.remote_env import remote_env_factory


def records(path: Path) -> list[dict[str, Any]]:
    out = []
    for line in path.read_text().splitlines():
        record = json.loads(line)
        if record.get("kind") != "trajectory":
            continue
        record.pop("timings")
        record.pop("run_id")
        out.append(record)
    return sorted(out, key=lambda r: (r["task_id"], r["sample"]))


@pytest.mark.parametrize("env_id", multiturn_envs.env_ids())
def test_records_over_the_wire_equal_in_process(env_id: str, tmp_path: Path) -> None:
    env_kwargs = env_kwargs_for(env_id)
    if env_id == "MT/DeepCoder-v0":
        # DeepCoder's error_action rejects mutants that time out under a short verification
        # limit (0.5 s), which a loaded machine can hit on one side and not the other: a
        # property of the env under CPU contention, not of the wire, so give it room here
        env_kwargs["verify_timeout_s"] = 5.0
    probe = gym.make(env_id, disable_env_checker=True, **env_kwargs)
    tasks = [str(t) for t in probe.unwrapped.task_ids()[:3]]
    probe.close()
    configs = [
        EvalConfig(env_id, "random", tasks, samples=2, max_turns=4, seed=3, env_kwargs=env_kwargs),
        EvalConfig(
            env_id,
            "noisy-expert:0.3",
            tasks,
            samples=2,
            max_turns=4,
            error_after=0,
            seed=5,
            env_kwargs=env_kwargs,
        ),
    ]
    with ServerProcess(env_id, env_kwargs) as url:
        for i, config in enumerate(configs):
            local, remote = tmp_path / f"local{i}.jsonl", tmp_path / f"remote{i}.jsonl"
            policy = baseline_from_name(config.policy)
            run_eval(config, policy, str(local), in_flight=3, progress=False)
            summary = run_eval(
                config,
                policy,
                str(remote),
                in_flight=3,
                workers=2,
                progress=False,
                make_env=remote_env_factory(url, expect_env_id=env_id),
            )
            assert summary.written == config.total()
            got, want = records(remote), records(local)
            assert len(got) == config.total()
            assert got == want
            assert want[0]["env_spec"] is not None  # the served env's spec, not null


def test_eval_env_url_on_the_command_line(tmp_path: Path) -> None:
    """``multiturn-envs eval --env-url`` writes the records of the in-process ``eval``."""
    from multiturn_envs.cli import EXIT_USAGE, main

    common = ["eval", "MT/FrozenLake-v0", "--policy", "random", "--tasks", "3", "-k", "2"]
    common += ["-t", "5", "--seed", "4", "--quiet"]
    local, remote = tmp_path / "local.jsonl", tmp_path / "remote.jsonl"
    assert main([*common, "--out", str(local)]) == 0
    with ServerProcess("MT/FrozenLake-v0", {}) as url:
        assert main([*common, "--out", str(remote), "--env-url", url]) == 0
        refused = main([*common, "--out", str(tmp_path / "x.jsonl"), "--env-url", url,
                        "--env-arg", "is_slippery=false"])  # fmt: skip
        assert refused == EXIT_USAGE
    assert records(remote) == records(local) and len(records(local)) == 6
