"""The tiny offline chat model, for tests: it lives in :mod:`multiturn_envs.rl.tiny_lm`.

The training entry point (layer 7) builds it for ``model="tiny"``, and layer 7 cannot import this
package (layer 8). So the code lives there, and these names stay importable from here as before.
"""

from multiturn_envs.rl.tiny_lm import (
    CHATML_TEMPLATE,
    SPECIAL_TOKENS,
    build_tiny_chat_model,
    load_tiny_chat_model,
)

__all__ = ["CHATML_TEMPLATE", "SPECIAL_TOKENS", "build_tiny_chat_model", "load_tiny_chat_model"]
