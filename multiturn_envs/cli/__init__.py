"""The ``multiturn-envs`` console script: a thin layer that parses arguments, calls the library
and prints. One module per command (``list``, ``eval``, ``report``, ``compare``, ``nll``/``llr``,
``dynamics``, ``sandbox``, ``serve``, ``train``); :mod:`.common` holds what they share (``FLAGS``:
one definition per shared flag). Nothing in the library imports this package, and nothing
outside it parses argv. docs/cli.md is generated from the parsers (:mod:`.docs`).
"""

from multiturn_envs.cli.app import build_parser, main
from multiturn_envs.cli.common import EXIT_INTERRUPTED, EXIT_USAGE, UsageError, parse_env_args

__all__ = ["EXIT_INTERRUPTED", "EXIT_USAGE", "UsageError", "build_parser", "main", "parse_env_args"]
