"""The oracle's actions: the next reference command, and plausible wrong commands.

``expert_action`` follows the task's reference solution while the agent's commands so far are
exactly its first commands (the state is on the reference path). Once they differ, the state
has left that path and no exact next command is known; the documented approximation is the
whole reference solution as one script, run from ``/app`` (the reference solutions are written
to be re-runnable: they overwrite rather than append, and create with ``-p``), followed by
``submit`` once every check passes.

``error_action`` is a one-edit mutation of the command the expert would send: a number
changed, a file name misspelt, a flag dropped. Such a command is plausible (a typo, an
off-by-one) and wrong, and, being a command, never ends the episode by itself.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence

import numpy as np

SUBMIT = "submit"


def _norm(command: str) -> str:
    return " ".join(command.split())


def reference_position(executed: Sequence[str], solution: Sequence[str]) -> int | None:
    """``k`` when the commands run so far are the solution's first ``k``, else ``None``."""
    if len(executed) > len(solution):
        return None
    for ran, ref in zip(executed, solution):
        if _norm(ran) != _norm(ref):
            return None
    return len(executed)


def whole_solution(solution: Sequence[str], workdir: str = "/app") -> str:
    """The off-path approximation: the full reference solution as one script from the task's
    working directory."""
    return f"cd {shlex.quote(workdir)}\n" + "\n".join(solution)


def expert_command(
    executed: Sequence[str], solution: Sequence[str], solved: bool, workdir: str = "/app"
) -> str:
    """The oracle's next action (see the module docstring)."""
    if solved:
        return SUBMIT
    k = reference_position(executed, solution)
    if k is None:
        return whole_solution(solution, workdir)
    if k < len(solution):
        return solution[k]
    return whole_solution(solution, workdir)  # the path is done yet a check fails: again


_NUMBER = re.compile(r"(?<![\w.-])(\d+)(?![\w.])")
_FILE = re.compile(r"(?<![\w./-])([\w-]+)\.([A-Za-z][\w]{0,5})\b")
_FLAG = re.compile(r"(?<=\s)-[A-Za-z]{1,3}(?=\s)")


def mutations(command: str) -> list[str]:
    """One-edit wrong variants of ``command`` (none equal to it), in a fixed order."""
    out: list[str] = []
    for m in _NUMBER.finditer(command):
        n = int(m.group(1))
        out.append(command[: m.start()] + str(n + 1 if n != 1 else 2) + command[m.end() :])
    for m in _FILE.finditer(command):
        stem = m.group(1)
        typo = stem[:-2] + stem[-1] + stem[-2] if len(stem) > 2 else stem + "s"
        if typo != stem:
            out.append(command[: m.start(1)] + typo + command[m.end(1) :])
    for m in _FLAG.finditer(command):
        out.append(command[: m.start()] + command[m.end() + 1 :])
    seen = {command}
    unique = []
    for variant in out:
        if variant not in seen and variant.strip() and _norm(variant) != SUBMIT:
            seen.add(variant)
            unique.append(variant)
    return unique


def error_command(expert: str, solution: Sequence[str], rng: np.random.Generator) -> str:
    """A plausible wrong command (see the module docstring) drawn with ``rng``."""
    base = expert if expert != SUBMIT else (solution[-1] if solution else "ls")
    if base.startswith("cd ") and "\n" in base and base.split("\n", 1)[1] == "\n".join(solution):
        base = solution[0] if solution else "ls"
    candidates = mutations(base)
    if not candidates:
        try:
            words = shlex.split(base, posix=True)
        except ValueError:  # unbalanced quotes
            words = base.split()
        target = words[-1] if words else "notes"
        candidates = [f"cat {shlex.quote(target + '.bak')}", "ls -la /app/missing"]
    return candidates[int(rng.integers(len(candidates)))]
