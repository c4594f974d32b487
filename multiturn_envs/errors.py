"""Every exception type the library raises on purpose (a leaf: it imports nothing of ours).

Like Gymnasium's ``gymnasium.error``, one module that every layer may import, so that an
exception's home never forces an import between layers (the CLI maps these to one-line
messages; the library never imports the CLI). All derive from built-in types, so existing
``except ValueError`` / ``except RuntimeError`` code keeps catching them.
"""

from __future__ import annotations

from gymnasium.error import ResetNeeded


class EpisodeOver(ResetNeeded):
    """Raised by ``step`` after the episode has terminated or been truncated."""


class EnvBusy(RuntimeError):
    """A synchronous ``reset``/``step`` on an env while one of its async calls (``areset``,
    ``astep``) holds it: one running in its worker thread (a cancelled ``astep`` included: its
    step cannot be stopped and completes first) or queued. Await the async calls, or keep to
    one API at a time (:mod:`multiturn_envs.step_gate`)."""


class UntrustedInputError(ValueError):
    """A file, folder or field someone else produced was refused (:mod:`multiturn_envs.untrusted`):
    a path leaving its folder, a file over its byte cap, text nested too deep, a field of the
    wrong type or out of its range. The message names the file (and the field) and the bound.
    """


class RecordFileError(UntrustedInputError):
    """A record file that cannot be read or resumed (the message says why and what to do)."""


class RunMismatch(RecordFileError):
    """The file's header describes a different run than the one asked for."""


class OutputFileError(ValueError):
    """An output file (JSON results, a plot, an exported log) that may not be written: the path
    holds a file this project did not write, or one it wrote but ``overwrite`` was not given
    (:mod:`multiturn_envs.output_files`)."""


class ReplayError(ValueError):
    """Replaying a record did not reproduce it (another env, options or seed, or a bad record)."""


class PolicyError(RuntimeError):
    """A policy broke the protocol: wrong number of replies, a reply that is not text, or a
    request field it may not use where it runs (``request.env`` on a remote policy actor)."""


class SpecError(ValueError):
    """A policy or scoring-model spec string that cannot be parsed or built."""


class TaskUnavailable(RuntimeError):
    """One task folder cannot run here; the message says why (and what to do). ``cause``: one
    word for reports: ``base`` (an image that cannot be pulled), ``network`` (a build step
    that downloads), ``package``, ``command``, ``file``, ``step`` (a build step's own
    error), ``timeout``, ``services`` (several containers), ``gpu``, ``env`` (a host variable
    not given), ``format`` (a format this env does not run)."""

    def __init__(self, message: str, cause: str = "format", log: str = "") -> None:
        super().__init__(message)
        self.cause = cause
        self.log = log
