"""What the commands share: the usage-error convention, flag ranges, env and executor setup.

The CLI's one promise of its own: a user mistake (a bad argument, an unknown env id, a record
file of another run or a broken one, a replay that does not reproduce its record) prints ONE
line on stderr and exits with status 2, never a traceback. Each numeric flag's range is its
``type=`` (the named ranges below: ``--in-flight 1000000000`` stops while parsing, before
anything is allocated); :func:`user_errors` turns the library's exceptions for such mistakes
(:mod:`multiturn_envs.errors`, ``ValueError``, a missing file) into :class:`UsageError`;
failures inside a run (a bug in an env or a policy) keep their traceback.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import gymnasium as gym

from multiturn_envs import env_args
from multiturn_envs.argtypes import FloatRange, IntRange
from multiturn_envs.errors import RecordFileError, SpecError
from multiturn_envs.harness.config import MAX_IN_FLIGHT, MAX_WORKERS
from multiturn_envs.wrappers.error_injection import MAX_PREFIX_STEPS

if TYPE_CHECKING:
    from multiturn_envs.harness.executors import RayExecutor
    from multiturn_envs.policies.base import AsyncPolicy, Policy

EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, what `head` leaves a shell pipeline of coreutils

# ------------------------------------------------------------------------------ flag ranges
# Each numeric flag's bounds, one definition per kind of flag (``type=`` of add_argument).
# Upper bounds stop a typo or a hostile script before it allocates: the library's own limits
# where it has one, else far above any real run.
SAMPLES = IntRange(1, 100_000)
"""K, trajectories per task (a schedule entry each)."""
MAX_TURNS = IntRange(1, 100_000)
"""T, a turn budget (records keep a list per turn)."""
ERROR_AFTER = IntRange(0, MAX_PREFIX_STEPS)
"""Expert steps before an injected error (each is played and kept in the history)."""
SEED = IntRange(0, 2**64 - 1)
"""A run or bootstrap seed (numpy's seeds; JSON keeps it exact)."""
IN_FLIGHT = IntRange(1, MAX_IN_FLIGHT)
"""Env instances held at once."""
WORKERS = IntRange(1, MAX_WORKERS)
"""Threads stepping envs."""
RAY_WORKERS = IntRange(1, 4096)
POLICY_ACTORS = IntRange(1, 1024)
ACTIONS = IntRange(1, 10_000)
"""Actions sampled per policy and state (same-state comparison)."""
BOOTSTRAP = IntRange(0, 100_000)
"""Bootstrap resamples (2,000 is the default; 10,000 is plenty)."""
ALPHA = FloatRange(0.0, 1.0, low_open=True, high_open=True)
"""1 - the confidence level."""
TRAIN_STEPS = IntRange(1, 10_000_000)
STEP_WEIGHT = FloatRange(0.0, 1_000_000.0)


class UsageError(Exception):
    """A mistake of the user's: printed as one line, exit status 2."""


class Parser(argparse.ArgumentParser):
    """argparse, but errors are one line (no usage dump) and exit with status 2."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message} (see --help)")


_USER_MISTAKES: tuple[type[Exception], ...] = (
    RecordFileError,
    SpecError,
    ValueError,
    ImportError,
    OSError,
)


@contextmanager
def user_errors(*extra: type[Exception], missing: str = "no such file") -> Iterator[None]:
    """Turn the library's user-mistake exceptions (and ``extra`` ones) into one-line
    :class:`UsageError` s."""
    try:
        yield
    except FileNotFoundError as exc:
        raise UsageError(f"{missing}: {exc.filename}") from None
    except (*_USER_MISTAKES, *extra) as exc:
        raise UsageError(str(exc).strip("'\"")) from None


def write_json(out: str | None, payload: Mapping[str, Any]) -> str:
    """Write ``payload`` to ``out`` (if given); the line that says so, or ``""``."""
    if out is None:
        return ""
    Path(out).write_text(json.dumps(payload, indent=2, default=str) + "\n", encoding="utf-8")
    return f"\nwritten: {out}"


def parse_env_args(pairs: Sequence[str]) -> dict[str, Any]:
    """``--env-arg`` pairs -> kwargs (:func:`multiturn_envs.env_args.parse_env_args`)."""
    try:
        return env_args.parse_env_args(pairs)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def int_list(text: str, what: str, minimum: int = 1) -> list[int]:
    """Comma-separated ints, each at least ``minimum``."""
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise UsageError(f"{what} wants comma-separated ints, got {text!r}") from None
    if not values or min(values) < minimum:
        raise UsageError(f"{what} wants comma-separated ints >= {minimum}, got {text!r}")
    return values


def make_env(env_id: str, env_kwargs: Mapping[str, Any]) -> gym.Env[str, str]:
    """``gym.make`` with user errors turned into :class:`UsageError`."""
    import multiturn_envs  # noqa: F401  (registers the MT/* ids)

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return gym.make(env_id, **dict(env_kwargs))
    except gym.error.UnregisteredEnv as exc:
        raise UsageError(
            f"unknown env id {env_id!r} ({exc}); `multiturn-envs list` shows the ids"
        ) from None
    except ImportError as exc:
        raise UsageError(f"env {env_id!r} cannot be imported: {exc}") from None
    except (TypeError, ValueError) as exc:
        raise UsageError(f"env {env_id!r} rejected its arguments: {exc}") from None


def env_factory(env_id: str, env_kwargs: Mapping[str, Any]) -> Callable[[], gym.Env[str, str]]:
    """A factory of fresh envs (``gym.make``) for analyses that replay or compare."""
    kwargs = dict(env_kwargs)

    def make() -> gym.Env[str, str]:
        return gym.make(env_id, **kwargs)

    return make


def resolve_tasks(available: Sequence[str], spec: str | None) -> list[str]:
    """``None`` -> all tasks; ``"N"`` -> the first N; ``"a,b"`` -> those ids (checked)."""
    ids = [str(t) for t in available]
    if spec is None:
        return ids
    spec = spec.strip()
    if spec.isdigit():
        n = int(spec)
        if n < 1:
            raise UsageError("--tasks N wants N >= 1")
        if n > len(ids):
            raise UsageError(f"--tasks {n}: the env has only {len(ids)} tasks")
        return ids[:n]
    wanted = [t.strip() for t in spec.split(",") if t.strip()]
    known = set(ids)
    unknown = [t for t in wanted if t not in known]
    if unknown:
        example = ", ".join(ids[:3])
        raise UsageError(f"unknown task id(s) {unknown[:3]}; the env's ids look like: {example}")
    if len(set(wanted)) != len(wanted):
        raise UsageError("--tasks lists a task id twice")
    return wanted


def env_tasks(env_id: str, env_kwargs: Mapping[str, Any], spec: str | None) -> list[str]:
    """The task ids ``--tasks`` chooses among the env's."""
    from multiturn_envs.wrappers import text_env_of

    env = make_env(env_id, env_kwargs)
    try:
        return resolve_tasks(text_env_of(env).task_ids(), spec)
    except TypeError as exc:
        raise UsageError(str(exc)) from None
    finally:
        env.close()


def load_policy(spec: str) -> Policy | AsyncPolicy:
    """A policy spec (``--policy``), with a bad spec as a :class:`UsageError`."""
    from multiturn_envs.policies import load_policy as load

    try:
        return load(spec)
    except (ValueError, ImportError, OSError) as exc:
        raise UsageError(f"policy {spec!r}: {exc}") from None


def add_ci_args(p: argparse.ArgumentParser) -> None:
    """Bootstrap interval options shared by the analyses."""
    p.add_argument(
        "--bootstrap", type=BOOTSTRAP, default=2000, help="resamples over tasks (0: none)"
    )
    p.add_argument("--alpha", type=ALPHA, default=0.05, help="1 - confidence level")
    p.add_argument("--seed", type=SEED, default=0, help="bootstrap seed")
    p.add_argument("--out", default=None, help="also write the numbers as JSON here")


def add_env_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--env-arg",
        action="append",
        default=[],
        metavar="K=V",
        help="a gym.make keyword argument (JSON value, else a string); repeatable",
    )


def add_executor_args(p: argparse.ArgumentParser) -> None:
    """Where episodes run (``eval`` and ``compare``): this process or Ray workers."""
    p.add_argument(
        "--executor",
        choices=("local", "ray"),
        default="local",
        help="local: this process; ray: shard over Ray workers (docs/scale-out.md)",
    )
    p.add_argument(
        "--ray-address",
        default=None,
        help="Ray cluster to join (auto | host:port); default RAY_ADDRESS, else a local Ray",
    )
    p.add_argument(
        "--ray-workers",
        type=RAY_WORKERS,
        default=None,
        help="rollout workers (default: cluster CPUs); --in-flight/--workers are per worker",
    )
    p.add_argument(
        "--policy-placement",
        choices=("worker", "actor-pool"),
        default=None,
        help="worker: a policy per rollout worker (default); actor-pool: shared policy actors",
    )
    p.add_argument(
        "--policy-actors", type=POLICY_ACTORS, default=None, help="actor-pool size (default 1)"
    )


def executor_of(args: argparse.Namespace, policy_spec: str) -> RayExecutor | None:
    """``--executor``: ``None`` (this process) or a ``RayExecutor`` running ``policy_spec``
    (docs/scale-out.md)."""
    if args.executor == "local":
        for flag in ("ray_address", "ray_workers", "policy_placement", "policy_actors"):
            if getattr(args, flag) is not None:
                raise UsageError(f"--{flag.replace('_', '-')} needs --executor ray")
        return None
    if importlib.util.find_spec("ray") is None:
        raise UsageError("--executor ray needs Ray: pip install 'multiturn-envs[ray]'")
    from multiturn_envs.harness.executors import RayExecutor
    from multiturn_envs.policies import load_policy as load

    return RayExecutor(
        address=args.ray_address,
        num_workers=args.ray_workers,
        policy_placement=args.policy_placement or "worker",
        policy_actors=args.policy_actors or 1,
        policy_factory=functools.partial(load, policy_spec),
    )
