"""Training: GRPO through TRL on any MT/* env (``multiturn-envs train``), and its pieces.

* :class:`TrainConfig` (:mod:`.config`): what one run is, read from JSON and checked;
* :class:`RunView` (:mod:`.run_view`): what a run sees of its env, asked once and passed to
  SFT, GRPO and the evaluation; :class:`Environments`, its TRL environments, all closed;
* :func:`train`, :func:`train_many`, :func:`train_rows` (:mod:`.training`): the run;
  :func:`start_model` (:mod:`.models`): the start model, built or loaded and warm-started;
  :func:`sft_warm_start`, :func:`expert_examples` (:mod:`.warm_start`),
  :func:`warm_start_tool_calls` (:mod:`.tool_format`);
* a run's folder (:mod:`.checkpoints`): :func:`ran_with`, :func:`check_output_dir`,
  :func:`resume_checkpoint`;
* :func:`gigpo_advantages` (:mod:`.gigpo`): GiGPO's two-level advantages from trajectories;
* a trained model as the harness's policy and scorer (:mod:`.evaluate`);
* the tiny offline models (:mod:`.tiny_lm`, :mod:`.tiny_agent`) and what the trainer relies on
  in TRL (:mod:`.trl_coupling`).

The trainer itself, :class:`~multiturn_envs.rl.trainer.MultiTurnGRPOTrainer`, subclasses TRL's
``GRPOTrainer`` and so imports TRL: it lives in :mod:`multiturn_envs.rl.trainer`, outside this
facade, which stays importable without TRL, torch or transformers (each is imported by the
function that needs it).
"""

# The public names of these modules (their ``__all__``) are this package's.
from multiturn_envs.rl import (
    checkpoints,
    config,
    evaluate,
    gigpo,
    models,
    run_view,
    tiny_agent,
    tiny_lm,
    tool_format,
    training,
    trl_coupling,
    warm_start,
)
from multiturn_envs.rl.checkpoints import *  # noqa: F403
from multiturn_envs.rl.config import *  # noqa: F403
from multiturn_envs.rl.evaluate import *  # noqa: F403
from multiturn_envs.rl.gigpo import *  # noqa: F403
from multiturn_envs.rl.models import *  # noqa: F403
from multiturn_envs.rl.run_view import *  # noqa: F403
from multiturn_envs.rl.tiny_agent import *  # noqa: F403
from multiturn_envs.rl.tiny_lm import *  # noqa: F403
from multiturn_envs.rl.tool_format import *  # noqa: F403
from multiturn_envs.rl.training import *  # noqa: F403
from multiturn_envs.rl.trl_coupling import *  # noqa: F403
from multiturn_envs.rl.warm_start import *  # noqa: F403

__all__: list[str] = []
__all__ += checkpoints.__all__
__all__ += config.__all__
__all__ += evaluate.__all__
__all__ += gigpo.__all__
__all__ += models.__all__
__all__ += run_view.__all__
__all__ += tiny_agent.__all__
__all__ += tiny_lm.__all__
__all__ += tool_format.__all__
__all__ += training.__all__
__all__ += trl_coupling.__all__
__all__ += warm_start.__all__
