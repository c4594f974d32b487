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
import os
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn

import gymnasium as gym

from multiturn_envs import env_args
from multiturn_envs.cli.argtypes import FloatRange, IntList, IntRange
from multiturn_envs.episode import EnvMaker
from multiturn_envs.episode import make_env as make_gym_env
from multiturn_envs.errors import RecordFileError, SpecError
from multiturn_envs.harness.config import MAX_IN_FLIGHT, MAX_WORKERS
from multiturn_envs.rl.config import MAX_STEP_WEIGHT, MAX_STEPS
from multiturn_envs.wrappers.error_injection import MAX_PREFIX_STEPS

if TYPE_CHECKING:
    from multiturn_envs.harness.ray_executor import RayExecutor
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
TRAIN_STEPS = IntRange(1, MAX_STEPS)
TURN_LIST = IntList(1, 100_000)
"""Turn budgets or T values (``--turn-grid``, ``--ts``, ``--budget-mix``)."""
SAMPLE_LIST = IntList(1, 100_000)
"""K values (``--ks``)."""
STEP_LIST = IntList(0, 10_000_000)
"""Training steps of checkpoints (``--checkpoint-steps``)."""
STEP_WEIGHT = FloatRange(0.0, MAX_STEP_WEIGHT)
TOKEN_LIMIT = IntRange(1, 10**12)
"""Tokens one episode may use (``eval --token-limit``)."""


class UsageError(Exception):
    """A mistake of the user's: printed as one line, exit status 2."""


class Parser(argparse.ArgumentParser):
    """argparse, but errors are one line (no usage dump) and exit with status 2; a description
    and an epilog (the examples) keep their line breaks (docs/cli.md renders them too)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(*args, **kwargs)

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
        text = str(exc)
        if isinstance(exc, KeyError):  # a KeyError's text is the repr of its key
            text = text.strip("'\"")
        raise UsageError(text) from None


def write_json(out: str | None, payload: Mapping[str, Any], overwrite: bool = False) -> str:
    """Write ``payload`` to ``out`` (if given) under the output rule (a new file, or one this
    project wrote with ``overwrite``: :mod:`multiturn_envs.output_files`); the line that says
    so, or ``""``."""
    if out is None:
        return ""
    from multiturn_envs.errors import OutputFileError
    from multiturn_envs.output_files import write_json_output

    try:
        write_json_output(out, payload, overwrite=overwrite)
    except OutputFileError as exc:
        raise UsageError(
            f"--json-out: {exc} (--overwrite replaces one this project wrote)"
        ) from None
    return f"\nwritten: {out}"


def parse_env_args(pairs: Sequence[str]) -> dict[str, Any]:
    """``--env-arg`` pairs -> kwargs (:func:`multiturn_envs.env_args.parse_env_args`)."""
    try:
        return env_args.parse_env_args(pairs)
    except ValueError as exc:
        raise UsageError(f"--env-arg: {exc}") from None


def make_env(env_id: str, env_kwargs: Mapping[str, Any]) -> gym.Env[str, str]:
    """``gym.make`` with user errors turned into :class:`UsageError`."""
    import multiturn_envs  # noqa: F401  (registers the MT/* ids)

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return make_gym_env(env_id, env_kwargs, checker=True)
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

    return EnvMaker(env_id, kwargs, checker=True)


def resolve_tasks(
    available: Sequence[str],
    spec: str | None,
    refusal: Callable[[str], str | None] | None = None,
) -> list[str]:
    """``None`` -> all tasks; ``"N"`` -> the first N; ``"a,b"`` -> those ids (checked).

    An id the env does not list is taken when ``refusal(id)`` is ``None`` (the env's ``reset``
    accepts it: FrozenLake's ``4x4`` or ``map:...``, which no list can hold), else refused
    with the env's reason."""
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
    reasons = {t: "not listed" for t in wanted if t not in known}
    if refusal is not None:
        for task in list(reasons)[:100]:  # each check resets an env: a bounded number
            why = refusal(task)
            if why is None:
                del reasons[task]
            else:
                reasons[task] = why
    if reasons:
        example = ", ".join(ids[:3])
        first = next(iter(reasons.items()))
        raise UsageError(
            f"unknown task id(s) {list(reasons)[:3]} ({first[0]}: {first[1][:200]}); the env's "
            f"ids look like: {example}"
        )
    if len(set(wanted)) != len(wanted):
        raise UsageError("--tasks lists a task id twice")
    return wanted


def env_tasks(env_id: str, env_kwargs: Mapping[str, Any], spec: str | None) -> list[str]:
    """The task ids ``--tasks`` chooses among the env's."""
    from multiturn_envs.wrappers import text_env_of

    env = make_env(env_id, env_kwargs)
    try:
        return resolve_tasks(text_env_of(env).task_ids(), spec, reset_refusal(env))
    except TypeError as exc:
        raise UsageError(str(exc)) from None
    finally:
        env.close()


def reset_refusal(env: gym.Env[str, str]) -> Callable[[str], str | None]:
    """Whether ``env`` accepts a task id: ``None`` when its ``reset`` takes it, else why not."""

    def refusal(task_id: str) -> str | None:
        try:
            env.reset(seed=0, options={"task_id": task_id})
        except KeyError as exc:  # its text is the repr of the key
            return str(exc).strip("'\"") or "KeyError"
        except (ValueError, LookupError) as exc:
            return str(exc) or type(exc).__name__
        return None

    return refusal


def load_policy(spec: str, cache: str | None = None) -> Policy | AsyncPolicy:
    """A policy spec (``--policy``; ``cache``: ``--cache``, a response cache file), with a bad
    spec or cache as a :class:`UsageError`."""
    from multiturn_envs.policies import load_policy as load

    try:
        return load(spec, cache=cache)
    except (ValueError, ImportError, OSError) as exc:
        raise UsageError(f"policy {spec!r}: {exc}") from None


# ------------------------------------------------------------------------------ shared flags
# A flag that several commands take is defined once, here: one spelling, one meaning, one type
# (with its range), one default, one help line. A command adds it with :func:`add_flags`;
# tests/test_cli_flags.py fails when two commands give one spelling two definitions.


@dataclass(frozen=True)
class Flag:
    """One shared flag: its spellings and ``add_argument`` keywords."""

    names: tuple[str, ...]
    kwargs: Mapping[str, Any]


FLAGS: dict[str, Flag] = {
    f.names[0]: f
    for f in (
        Flag(
            ("--tag",),
            dict(
                default=None,
                help="the tag of the image to build (default: the command's image; a variant "
                "tag never replaces the default image)",
            ),
        ),
        Flag(
            ("--env-arg",),
            dict(
                action="append",
                default=[],
                metavar="K=V",
                help="a gym.make keyword argument; V is JSON when it parses (8, false, [1,2]), "
                "else a string",
            ),
        ),
        Flag(
            ("--engine",),
            dict(
                action="append",
                default=[],
                metavar="ADDRESS",
                help="a Docker engine for the sandboxed envs (local, unix://PATH, "
                "tcp://HOST:2376?tls=DIR, ssh://USER@HOST); repeat it for several, placed by "
                "load (sets $MTE_ENGINES for this process and its workers; "
                "docs/sandbox-scale-out.md)",
            ),
        ),
        Flag(
            ("--tasks",),
            dict(
                default=None,
                help="N (the first N task ids) or comma-separated task ids (default: all)",
            ),
        ),
        Flag(("--samples", "-k"), dict(type=SAMPLES, default=8, help="K, episodes per task")),
        Flag(("--max-turns", "-t"), dict(type=MAX_TURNS, default=8, help="T, the turn budget")),
        Flag(
            ("--error-after",),
            dict(
                type=ERROR_AFTER,
                default=None,
                metavar="k",
                help="inject an error after k expert steps (ErrorInjection; default: none)",
            ),
        ),
        Flag(("--seed",), dict(type=SEED, default=0, help="the run's seed")),
        Flag(
            ("--bootstrap",),
            dict(type=BOOTSTRAP, default=2000, help="bootstrap resamples over tasks (0: none)"),
        ),
        Flag(("--alpha",), dict(type=ALPHA, default=0.05, help="1 - the confidence level")),
        Flag(("--bootstrap-seed",), dict(type=SEED, default=0, help="the bootstrap's seed")),
        Flag(
            ("--json-out",),
            dict(default=None, metavar="FILE.json", help="also write the numbers as JSON here"),
        ),
        Flag(
            ("--overwrite",),
            dict(
                action="store_true",
                help="replace an output file this project wrote (a file it did not write is "
                "never replaced: name another)",
            ),
        ),
        Flag(
            ("--system-prompt",),
            dict(default=None, help="score with this system prompt instead of the env's"),
        ),
        Flag(("--quiet", "-q"), dict(action="store_true", help="no progress display, no summary")),
        Flag(
            ("--executor",),
            dict(
                choices=("local", "ray"),
                default="local",
                help="local: this process; ray: shard over Ray workers (docs/scale-out.md)",
            ),
        ),
        Flag(
            ("--ray-address",),
            dict(
                default=None,
                help="Ray cluster to join (auto | host:port); default RAY_ADDRESS, else a local "
                "Ray",
            ),
        ),
        Flag(
            ("--ray-workers",),
            dict(
                type=RAY_WORKERS,
                default=None,
                help="rollout workers (default: cluster CPUs); --in-flight/--workers are per "
                "worker",
            ),
        ),
        Flag(
            ("--policy-placement",),
            dict(
                choices=("worker", "actor-pool"),
                default=None,
                help="worker: a policy per rollout worker (default); actor-pool: shared policy "
                "actors",
            ),
        ),
        Flag(
            ("--policy-actors",),
            dict(type=POLICY_ACTORS, default=None, help="actor-pool size (default 1)"),
        ),
    )
}


def add_flags(p: argparse.ArgumentParser, *names: str, overlay: bool = False) -> None:
    """Add the shared flags ``names`` (their first spelling) to ``p``.

    ``overlay=True`` (``train``, whose flags override a config file's fields) makes each
    default ``None``: a flag not given leaves the config's value.
    """
    for name in names:
        flag = FLAGS[name]
        kwargs = dict(flag.kwargs)
        if overlay and kwargs.get("action") is None:
            kwargs["default"] = None
        p.add_argument(*flag.names, **kwargs)


def add_ci_args(p: argparse.ArgumentParser) -> None:
    """Bootstrap interval options shared by the analyses."""
    add_flags(p, "--bootstrap", "--alpha", "--bootstrap-seed")


def add_env_args(p: argparse.ArgumentParser) -> None:
    add_flags(p, "--env-arg", "--engine")


def use_engines(addresses: Sequence[str]) -> dict[str, str]:
    """``--engine``: check the addresses and make them the process's default engines
    (``$MTE_ENGINES``, read by every sandboxed env that names none, by a server's workers and
    by Ray workers through :func:`executor_of`); returns the variables set (``{}``: none
    given, the environment's choice stands)."""
    if not addresses:
        return {}
    from multiturn_envs.sandbox.engines import ENGINES_VARIABLE, parse_engines

    try:
        parsed = parse_engines(list(addresses))
    except ValueError as exc:
        raise UsageError(f"--engine: {exc}") from None
    variables = {ENGINES_VARIABLE: " ".join(str(a) for a in parsed)}
    os.environ.update(variables)
    return variables


def add_executor_args(p: argparse.ArgumentParser) -> None:
    """Where episodes run (``eval`` and ``compare``): this process or Ray workers."""
    add_flags(p, "--executor", "--ray-address", "--ray-workers", "--policy-placement")
    add_flags(p, "--policy-actors")


def executor_of(
    args: argparse.Namespace, policy_spec: str, cache: str | None = None
) -> RayExecutor | None:
    """``--executor``: ``None`` (this process) or a ``RayExecutor`` running ``policy_spec``
    (docs/scale-out.md)."""
    if args.executor == "local":
        for flag in ("ray_address", "ray_workers", "policy_placement", "policy_actors"):
            if getattr(args, flag) is not None:
                raise UsageError(f"--{flag.replace('_', '-')} needs --executor ray")
        return None
    if importlib.util.find_spec("ray") is None:
        raise UsageError("--executor ray needs Ray: pip install 'multiturn-envs[ray]'")
    from multiturn_envs.harness.ray_executor import RayExecutor
    from multiturn_envs.policies import load_policy as load

    engines = use_engines(getattr(args, "engine", []))
    return RayExecutor(
        init_kwargs={"runtime_env": {"env_vars": engines}} if engines else {},
        address=args.ray_address,
        num_workers=args.ray_workers,
        policy_placement=args.policy_placement or "worker",
        policy_actors=args.policy_actors or 1,
        policy_factory=functools.partial(load, policy_spec, cache=cache),
    )
