"""The reference harness and its stable API.

Import what you use from here (``from multiturn_envs.harness import run_eval, read_run``): the
submodules may move, these names stay. This package's public names are those its modules list
in their ``__all__`` (each name once, in the module that defines it); ``__all__`` here is their
union, and ``tests/test_architecture.py`` checks it. The layers (docs/architecture.md):
:mod:`.run_config` (``EvalConfig``: what a run computes, the one definition of the run header's
config), :mod:`.records` (the typed schema and the crash-safe writer), :mod:`.config` (how a
run executes, seeds), :mod:`.replay`
(the one way to rebuild an episode from a record), :mod:`.runner` / :mod:`.executors` /
:mod:`.ray_executor` / :mod:`.rollout` (running), :mod:`.passk` / :mod:`.bootstrap`
(estimators and intervals), and the analyses
(:mod:`.same_state`, :mod:`.continuation`, :mod:`.likelihood`, :mod:`.dynamics`,
:mod:`.report`).
"""

# The public names of these modules (their ``__all__``) are this package's.
from multiturn_envs.harness import (
    bootstrap,
    config,
    continuation,
    dynamics,
    executors,
    likelihood,
    passk,
    ray_executor,
    records,
    replay,
    report,
    rollout,
    run_config,
    same_state,
)
from multiturn_envs.harness.bootstrap import *  # noqa: F403
from multiturn_envs.harness.config import *  # noqa: F403
from multiturn_envs.harness.continuation import *  # noqa: F403
from multiturn_envs.harness.dynamics import *  # noqa: F403
from multiturn_envs.harness.executors import *  # noqa: F403
from multiturn_envs.harness.likelihood import *  # noqa: F403
from multiturn_envs.harness.passk import *  # noqa: F403
from multiturn_envs.harness.ray_executor import *  # noqa: F403
from multiturn_envs.harness.records import *  # noqa: F403
from multiturn_envs.harness.replay import *  # noqa: F403
from multiturn_envs.harness.report import *  # noqa: F403
from multiturn_envs.harness.rollout import *  # noqa: F403
from multiturn_envs.harness.run_config import *  # noqa: F403
from multiturn_envs.harness.same_state import *  # noqa: F403

__all__: list[str] = []
__all__ += bootstrap.__all__
__all__ += config.__all__
__all__ += continuation.__all__
__all__ += dynamics.__all__
__all__ += executors.__all__
__all__ += likelihood.__all__
__all__ += passk.__all__
__all__ += ray_executor.__all__
__all__ += records.__all__
__all__ += replay.__all__
__all__ += report.__all__
__all__ += rollout.__all__
__all__ += run_config.__all__
__all__ += same_state.__all__
