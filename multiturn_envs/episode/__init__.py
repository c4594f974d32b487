"""The episode kit: what every edge where users meet the project shares about one episode.

* :mod:`.making`: how an env is made, with or without Gymnasium's checker (:func:`make_env`,
  :class:`EnvMaker`);
* :mod:`.start`: how a dataset row or a client payload starts an episode (:class:`EpisodeStart`,
  the one reader of ``task_id``, ``seed``, ``max_turns``, ``budget_mode``, ``error_after`` and
  ``reward``);
* :mod:`.log`: how the episode ran (:class:`EpisodeLog`) and why it ended (:data:`ENDS`).

The TRL, SkyRL, verl and verifiers adapters, the server's sessions and the training stack use
these (docs/episode-kit.md)::

    from multiturn_envs.episode import EpisodeLog, EpisodeStart, make_env

    env = make_env("MT/FrozenLake-v0", {"max_turns": 8})
    start = EpisodeStart.from_row({"task_id": "4x4", "seed": 3, "max_turns": 4})
    observation, info = start.reset(env)
    log = EpisodeLog(start.reward)
    log.begin(info, seed=start.seed)
    _, reward, terminated, truncated, info = env.step("<answer>Down</answer>")
    log.add(reward, terminated, truncated, info)
    log.summary()["turns"]      # 1
"""

# The public names of these modules (their ``__all__``) are this package's.
from multiturn_envs.episode import log, making, start
from multiturn_envs.episode.log import *  # noqa: F403
from multiturn_envs.episode.making import *  # noqa: F403
from multiturn_envs.episode.start import *  # noqa: F403

__all__: list[str] = []
__all__ += log.__all__
__all__ += making.__all__
__all__ += start.__all__
