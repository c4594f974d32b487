"""MT/Lights-v0: the env template. Copy this folder to ``multiturn_envs/envs/<your_env>/``.

Its files are the "add an env" checklist (CONTRIBUTING.md), worked: ``env.py`` (the env, each
step of the checklist where it applies), ``tasks.json`` (task data, read through
``importlib.resources``), ``test_env.py`` (its tests: the conformance check and the
hypothesis state machine, in a few lines), and this ``__init__.py`` in the one style of an env
package (:mod:`multiturn_envs.envs.lazy`). The test suite runs the template's tests
(``tests/testing/test_env_template.py``), so the template always works.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from multiturn_envs.envs.lazy import lazy_exports

if TYPE_CHECKING:
    from multiturn_envs.testing.template.env import LightsEnv as LightsEnv

HOMES: dict[str, str] = {"LightsEnv": "env"}
"""Each public name -> the module it lives in."""
__all__ = ["LightsEnv"]
__getattr__, __dir__ = lazy_exports(__name__, HOMES)
