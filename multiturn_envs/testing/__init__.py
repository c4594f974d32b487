"""Helpers for env authors and test suites.

* :func:`check_text_env` (:mod:`.conformance`): a conformance check any MT/* env (ours or a
  user's) can run in its own tests, in the spirit of PettingZoo's ``api_test``::

      from multiturn_envs.testing import check_text_env

      def test_my_env_conforms():
          check_text_env(lambda: MyEnv(max_turns=5))

* :class:`GuessEnv` (:mod:`.guess_env`): the smallest complete ``TextEnv``, a template for new
  envs and the toy of our own tests.
* :func:`text_env_machine` (:mod:`.env_machine`): a hypothesis state machine that explores
  any env's dynamics (exact budget, scores in [0, 1], snapshots that replay, close twice)::

      TestMyEnvDynamics = text_env_machine(lambda: MyEnv(max_turns=5)).TestCase

  with the actions of :mod:`.strategies` (well-formed, the oracle's, tool calls, degenerate
  replies). hypothesis is imported only when these are used.
* :func:`require` (:mod:`.real_parts`): skip a test whose real part is missing, but fail under
  ``CI=true``; :func:`require_docker`, :func:`require_terminal_image`,
  :func:`require_packages` for the usual real parts.
* :mod:`.probe`: ``ProbeEnv``, an env that hangs, spins, segfaults or eats memory on command.

The tiny offline models live in :mod:`multiturn_envs.rl.tiny_lm` and
:mod:`multiturn_envs.rl.tiny_agent`.
"""

# The public names of these modules (their ``__all__``) are this package's.
from multiturn_envs.testing import conformance, env_machine, guess_env, real_parts, strategies
from multiturn_envs.testing.conformance import *  # noqa: F403
from multiturn_envs.testing.env_machine import *  # noqa: F403
from multiturn_envs.testing.guess_env import *  # noqa: F403
from multiturn_envs.testing.real_parts import *  # noqa: F403
from multiturn_envs.testing.strategies import *  # noqa: F403

__all__: list[str] = []
__all__ += conformance.__all__
__all__ += env_machine.__all__
__all__ += guess_env.__all__
__all__ += real_parts.__all__
__all__ += strategies.__all__
