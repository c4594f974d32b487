"""Sandboxes placed by Ray on a real multi-node cluster (``ray.cluster_utils.Cluster``: two
raylets on this machine, each a node of its own): one sandbox actor per node owns the node's
code pool, DeepCoder-MT episodes in a worker send their submissions to their own node's actor,
and the records equal a local run's."""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from multiturn_envs.harness import EvalConfig, run_eval
from multiturn_envs.harness.ray_executor import RayExecutor
from multiturn_envs.harness.records import read_run, record_key
from multiturn_envs.policies.baselines import NoisyExpertPolicy
from multiturn_envs.testing import require, require_docker

pytestmark = pytest.mark.docker

TASKS = ["bundled/climb-stairs", "bundled/count-vowels", "bundled/count-words"]


@pytest.fixture(scope="module")
def two_nodes() -> Iterator[Any]:
    require(importlib.util.find_spec("ray") is not None, "Ray (pip install 'multiturn-envs[ray]')")
    require_docker()
    import ray
    from ray.cluster_utils import Cluster

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 1, "include_dashboard": False},
    )
    cluster.add_node(num_cpus=1)
    try:
        ray.init(address=cluster.address, log_to_driver=False)
        cluster.wait_for_nodes()
        yield ray
    finally:
        ray.shutdown()
        cluster.shutdown()


def _records(path: Path) -> dict[Any, tuple[bool, int, list[str]]]:
    return {
        record_key(r): (bool(r["success"]), int(r["turns"]), [str(a) for a in r["actions"]])
        for r in read_run(str(path)).records
    }


def test_each_node_owns_its_pool_and_episodes_run_where_their_sandbox_is(
    two_nodes: Any, tmp_path: Path
) -> None:
    nodes = [n["NodeID"] for n in two_nodes.nodes() if n["Alive"]]
    assert len(nodes) == 2
    cfg = EvalConfig(
        env_id="MT/DeepCoder-v0",
        policy="noisy-expert:0.5",
        tasks=TASKS,
        samples=2,
        max_turns=3,
        seed=3,
        env_kwargs={"backend": "multiturn_envs.harness.ray_sandboxes:node_sandbox"},
    )
    summary = run_eval(
        cfg,
        NoisyExpertPolicy(0.5),
        str(tmp_path / "ray.jsonl"),
        progress=False,
        executor=RayExecutor(num_workers=2, sandbox_placement="node"),
    )
    # one actor per node, each serving the submissions of the worker pinned to its node
    assert sorted(summary.sandbox_runs) == sorted(nodes)
    assert all(runs > 0 for runs in summary.sandbox_runs.values()), summary.sandbox_runs
    local_cfg = dataclasses.replace(cfg, env_kwargs={"backend": "docker"})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        run_eval(local_cfg, NoisyExpertPolicy(0.5), str(tmp_path / "local.jsonl"), progress=False)
    ray_records, local_records = (
        _records(tmp_path / "ray.jsonl"),
        _records(tmp_path / "local.jsonl"),
    )
    assert len(ray_records) == 6 and ray_records == local_records


def test_a_bad_placement_or_engine_table_is_refused_before_any_work(two_nodes: Any) -> None:
    with pytest.raises(ValueError, match="sandbox_placement"):
        RayExecutor(sandbox_placement="everywhere")
    from multiturn_envs.harness.ray_sandboxes import place_node_sandboxes

    with pytest.raises(ValueError, match=r"sandbox_engines\['10.0.0.1'\]"):
        place_node_sandboxes({"10.0.0.1": ["tcp://a:0"]})


@pytest.mark.parametrize(
    ("placement", "engines", "words"),
    [
        ("node", {"10.0.0.1": ["tcp://a:0"]}, r"sandbox_engines\['10.0.0.1'\]"),
        ("node", {"10.0.0.1": "tcp://a:2375"}, "mapped to a list of addresses"),
        ("node", {"10.0.0.1": [7]}, r"sandbox_engines\['10.0.0.1'\]: an engine address is text"),
        ("node", ["tcp://a:2375"], "maps a node id or IP"),
        ("spread", {"10.0.0.1": ["tcp://a:2375"]}, "only with sandbox_placement='node'"),
    ],
)
def test_an_engine_table_is_read_when_the_executor_is_made(
    placement: str, engines: Any, words: str
) -> None:
    """Before Ray starts: the executor is a dataclass a config file fills."""
    with pytest.raises(ValueError, match=words):
        RayExecutor(sandbox_placement=placement, sandbox_engines=engines)
    good = RayExecutor(sandbox_placement="node", sandbox_engines={"n1": ("tcp://a:2375",)})
    assert good.sandbox_engines == {"n1": ["tcp://a:2375"]}


def test_the_node_backend_outside_a_node_placement_says_what_it_needs(two_nodes: Any) -> None:
    from multiturn_envs.harness.ray_sandboxes import NodeSandbox

    @two_nodes.remote(num_cpus=0)
    def make() -> str:
        try:
            NodeSandbox()
        except RuntimeError as exc:
            return str(exc)
        return "made"

    assert "sandbox_placement='node'" in two_nodes.get(make.remote())
