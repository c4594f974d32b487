"""The tiny tool-calling model, for tests: it lives in :mod:`multiturn_envs.rl.tiny_agent`.

The training entry point (layer 7) builds it for ``model="tiny"``, and layer 7 cannot import this
package (layer 8). So the code lives there, and these names stay importable from here as before.
"""

from multiturn_envs.rl.tiny_agent import build_tiny_tool_model, tool_chat_template, tool_frames

__all__ = ["build_tiny_tool_model", "tool_chat_template", "tool_frames"]
