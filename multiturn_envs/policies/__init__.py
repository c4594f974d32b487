"""Policies and their stable API: the batched protocol, baselines, LLM backends, scoring models.

Import what you use from here (``from multiturn_envs.policies import load_policy``). This
package's public names are those its modules list in their ``__all__`` (each name once, in the
module that defines it); ``__all__`` here is their union, and ``tests/test_architecture.py``
checks it. Heavy backends (torch, vLLM) are imported only when a model is loaded.
"""

# The public names of these modules (their ``__all__``) are this package's.
from multiturn_envs.policies import (
    action_extractor,
    base,
    baselines,
    prompting,
    response_cache,
    sampling,
    scoring,
    spec,
)
from multiturn_envs.policies.action_extractor import *  # noqa: F403
from multiturn_envs.policies.base import *  # noqa: F403
from multiturn_envs.policies.baselines import *  # noqa: F403
from multiturn_envs.policies.prompting import *  # noqa: F403
from multiturn_envs.policies.response_cache import *  # noqa: F403
from multiturn_envs.policies.sampling import *  # noqa: F403
from multiturn_envs.policies.scoring import *  # noqa: F403
from multiturn_envs.policies.spec import *  # noqa: F403

__all__: list[str] = []
__all__ += action_extractor.__all__
__all__ += base.__all__
__all__ += baselines.__all__
__all__ += prompting.__all__
__all__ += response_cache.__all__
__all__ += sampling.__all__
__all__ += scoring.__all__
__all__ += spec.__all__
