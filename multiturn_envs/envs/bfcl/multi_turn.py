"""One multi-turn BFCL episode: the agent's backends, the ground truth's, BFCL's checks, the oracle.

The episode keeps two private :class:`BackendSet` s built from the entry's initial config: the
agent's, on which its calls run, and the ground truth's, which advances by the ground-truth calls
of each user turn when that turn ends. At the end of a user turn whose ground truth is not empty,
BFCL's multi-turn criteria decide (``multi_turn_checker``):

1. the agent made at least one call in this turn (``multi_turn:empty_turn_model_response``);
2. every public attribute of every ground-truth instance ``==`` the agent's
   (``multi_turn:instance_state_mismatch``);
3. every ground-truth result string of this turn is among the agent's results of all turns so
   far, as a multiset (``multi_turn:execution_response_mismatch``).

Turns with an empty ground truth (miss_param, the turn before a miss_func release) are not
checked, as in BFCL. Result strings are kept, for the response check, as themselves or (past
:data:`RESULT_KEY_CHARS` characters) as a digest, so a checked result of any size costs a few
bytes; an agent call that takes its backend's state past the env's :class:`StateLimits` is
undone (the agent's backends go back to where the reply started and the reply's earlier calls
are run again), its result says why, and the rest of the reply is not run.

The step oracle (see ``docs/envs/bfcl.md``) scores a reply with calls by the fraction of its
calls that match a ground-truth call still outstanding in the current user turn (same function,
same arguments after binding to the signature with defaults), and a reply that ends the turn by
whether the turn's check passes now (for an empty-ground-truth turn: whether the backend state
still equals the ground truth's).
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from multiturn_envs.envs.bfcl.backends import BackendSet, DispatchError
from multiturn_envs.envs.bfcl.calls import Call, CallParseError, decode, render_calls
from multiturn_envs.envs.bfcl.data import MultiTurnEntry
from multiturn_envs.envs.bfcl.state_bounds import StateLimits, state_problem

END_OF_TURN_REPLY = "I have completed your request."
RESULT_KEY_CHARS = 256
"""Result strings longer than this are kept (for the response check) as a digest."""


def result_key(result: str) -> str:
    """What the response check compares: the string itself, or a digest of a long one."""
    if len(result) <= RESULT_KEY_CHARS:
        return result
    digest = hashlib.sha256(result.encode("utf-8", "surrogatepass")).hexdigest()
    return f"<{len(result)} characters, sha256 {digest}>"


def cut(text: str, limit: int) -> str:
    """``text`` within ``limit`` characters, the cut marked with how much there was."""
    if len(text) <= limit:
        return text
    note = f"... [cut: {len(text):,} characters in all]"
    return text[: max(limit - len(note), 0)] + note


@dataclass
class TurnVerdict:
    """The outcome of BFCL's check at the end of one user turn."""

    valid: bool
    error_type: str = ""
    message: str = ""


@dataclass
class _Progress:
    """Everything about an episode that changes, apart from the backends (snapshot unit)."""

    turn_index: int = 0
    outstanding: list[int] = field(default_factory=list)  # indices into the turn's GT calls
    calls_this_turn: int = 0
    replies_this_turn: int = 0
    all_results: list[str] = field(default_factory=list)  # result_key()s
    released: list[str] = field(default_factory=list)
    verdicts: list[dict[str, Any]] = field(default_factory=list)
    finished: bool = False
    passed: bool = False


def parse_ground_truth(entry: MultiTurnEntry) -> list[list[Call]]:
    """The entry's ground-truth call strings, decoded by the same parser as the agent's replies."""
    turns: list[list[Call]] = []
    for turn in entry.ground_truth:
        calls: list[Call] = []
        for text in turn:
            calls.extend(decode(text).calls)
        turns.append(calls)
    return turns


class MultiTurnEpisode:
    """The live state of one multi-turn entry (see the module docstring)."""

    def __init__(
        self,
        entry: MultiTurnEntry,
        docs: dict[str, list[dict[str, Any]]],
        state_limits: StateLimits | None = None,
    ) -> None:
        self.entry = entry
        self.state_limits = state_limits or StateLimits()
        self.ground_truth = parse_ground_truth(entry)
        self.docs = docs  # class name -> function docs
        self.agent = BackendSet(entry.involved_classes, entry.initial_config, entry.long_context)
        self.reference = BackendSet(
            entry.involved_classes, entry.initial_config, entry.long_context
        )
        self._missed = {name for names in entry.missed_function.values() for name in names}
        self.progress = _Progress()
        self._start_turn(0)

    # ------------------------------------------------------------------ what the agent sees
    @property
    def n_turns(self) -> int:
        return len(self.entry.question)

    def available_docs(self) -> list[dict[str, Any]]:
        """Function docs shown so far (held-out miss_func functions only once released)."""
        return [
            doc
            for class_name in self.entry.involved_classes
            for doc in self.docs[class_name]
            if doc["name"] not in self._missed or doc["name"] in self.progress.released
        ]

    def callable_names(self) -> set[str]:
        """Functions a call may name: every documented one of the involved classes.

        As in BFCL, held-out miss_func functions are executable before their docs are released
        (one ground truth, multi_turn_miss_func_49, calls ``tail`` two turns early).
        """
        return {d["name"] for c in self.entry.involved_classes for d in self.docs[c]}

    def initial_docs(self) -> list[dict[str, Any]]:
        return [
            doc
            for class_name in self.entry.involved_classes
            for doc in self.docs[class_name]
            if doc["name"] not in self._missed
        ]

    def user_message(self, turn_index: int) -> str:
        """The user's message(s) opening ``turn_index`` (BFCL's text for a miss_func release)."""
        from multiturn_envs.envs.bfcl.data import MISSED_FUNCTION_PROMPT

        key = str(turn_index)
        if key in self.entry.missed_function:
            names = set(self.entry.missed_function[key])
            released = [
                d for c in self.entry.involved_classes for d in self.docs[c] if d["name"] in names
            ]
            return f"{json.dumps(released)}\n{MISSED_FUNCTION_PROMPT}"
        messages = self.entry.question[turn_index]
        return "\n".join(m["content"] for m in messages if m.get("role") == "user") or "\n".join(
            m["content"] for m in messages
        )

    # ------------------------------------------------------------------ dynamics
    def _start_turn(self, turn_index: int) -> None:
        p = self.progress
        p.turn_index = turn_index
        p.outstanding = list(range(len(self.ground_truth[turn_index])))
        p.calls_this_turn = 0
        p.replies_this_turn = 0
        key = str(turn_index)
        if key in self.entry.missed_function:
            p.released.extend(self.entry.missed_function[key])

    def run_calls(
        self, calls: tuple[Call, ...], max_result_chars: int | None = None
    ) -> tuple[list[str], float, bool]:
        """Execute the agent's calls; returns (observation lines, step score, any unknown name).

        Each result is shown cut to ``max_result_chars`` (the response check sees it whole).
        """
        p = self.progress
        allowed = self.callable_names()
        gt = self.ground_truth[p.turn_index]
        lines: list[str] = []
        matched = 0
        unknown = False
        # where an undone call takes the backends back to: each backend as the reply found
        # it, pickled when the reply first calls it
        checkpoints: dict[str, bytes] = {}
        accepted: list[Call] = []
        undone = False
        for call in calls:
            p.calls_this_turn += 1
            if undone:
                result = "Error during execution: not run: an earlier call of this reply was undone"
            elif call.name not in allowed:
                unknown = True
                result = (
                    f"Error during execution: {call.name!r} is not one of the functions you "
                    "were given"
                )
            else:
                match = self._match(call, gt, p.outstanding)
                if match is not None:
                    p.outstanding.remove(match)
                    matched += 1
                owner = self.agent.owner_of(call.name)
                tracked = owner is not None and not self.agent.stateless(owner)
                if tracked and owner not in checkpoints:
                    assert owner is not None
                    checkpoints[owner] = self.agent.snapshot_instance(owner)
                try:
                    result = self.agent.execute(call)
                except DispatchError as exc:
                    unknown = True
                    result = f"Error during execution: {exc}"
                else:
                    problem = None
                    if tracked:
                        assert owner is not None
                        problem = state_problem(self.agent.instances[owner], self.state_limits)
                    if problem is None:
                        accepted.append(call)
                    else:
                        for class_name, checkpoint in checkpoints.items():
                            self.agent.restore_instance(class_name, checkpoint)
                        for earlier in accepted:
                            self.agent.execute(earlier)
                        result = f"Error during execution: {problem}; the call was undone"
                        undone = True
            p.all_results.append(result_key(result))
            shown = result if max_result_chars is None else cut(result, max_result_chars)
            lines.append(f"{call.render()} -> {shown}")
        return lines, matched / len(calls), unknown

    def _match(self, call: Call, gt: list[Call], outstanding: list[int]) -> int | None:
        try:
            mine = self.agent.bind(call)
        except (TypeError, DispatchError):
            return None
        for index in outstanding:
            expected = gt[index]
            if expected.name != call.name:
                continue
            try:
                if self.agent.bind(expected) == mine:
                    return index
            except (TypeError, DispatchError):
                continue
        return None

    def end_turn(self) -> tuple[TurnVerdict, float]:
        """The agent ended the user turn: advance the ground truth and run BFCL's check."""
        p = self.progress
        gt = self.ground_truth[p.turn_index]
        gt_results = [result_key(self.reference.execute(call)) for call in gt]
        if not gt:
            equal, _ = self.agent.state_equal(self.reference)
            verdict = TurnVerdict(True)
            score = 1.0 if equal else 0.0
        else:
            verdict = self._check(gt_results)
            score = 1.0 if verdict.valid else 0.0
        p.verdicts.append(
            {"turn": p.turn_index, "valid": verdict.valid, "error_type": verdict.error_type}
        )
        if not verdict.valid:
            p.finished, p.passed = True, False
        elif p.turn_index + 1 >= self.n_turns:
            p.finished, p.passed = True, True
        else:
            self._start_turn(p.turn_index + 1)
        return verdict, score

    def _check(self, gt_results: list[str]) -> TurnVerdict:
        p = self.progress
        if p.calls_this_turn == 0:
            return TurnVerdict(
                False,
                "multi_turn:empty_turn_model_response",
                f"no function was called in user turn {p.turn_index}",
            )
        equal, differences = self.agent.state_equal(self.reference)
        if not equal:
            return TurnVerdict(
                False,
                "multi_turn:instance_state_mismatch",
                f"the backend state differs from the ground truth's in {', '.join(differences)}",
            )
        remaining = list(p.all_results)
        missing = []
        for item in gt_results:
            if item in remaining:
                remaining.remove(item)
            else:
                missing.append(item)
        if missing:
            return TurnVerdict(
                False,
                "multi_turn:execution_response_mismatch",
                f"{len(missing)} ground-truth result(s) of this turn are missing from your results",
            )
        return TurnVerdict(True)

    def fail(self, error_type: str) -> None:
        """End the entry as failed (BFCL's force-quit after too many steps in one turn)."""
        p = self.progress
        p.verdicts.append({"turn": p.turn_index, "valid": False, "error_type": error_type})
        p.finished, p.passed = True, False

    # ------------------------------------------------------------------ oracle
    def outstanding_calls(self) -> list[Call]:
        gt = self.ground_truth[self.progress.turn_index]
        return [gt[i] for i in self.progress.outstanding]

    def expert_reply(self) -> str:
        """All outstanding ground-truth calls of this turn in one reply, else end the turn."""
        calls = self.outstanding_calls()
        return render_calls(calls) if calls else END_OF_TURN_REPLY

    def error_reply(self, rng: np.random.Generator) -> str:
        """A plausible wrong call that executes: a wrong argument value or a wrong function."""
        outstanding = self.outstanding_calls()
        pool = outstanding or [c for turn in self.ground_truth for c in turn]
        allowed = self.callable_names()
        pool = [c for c in pool if c.name in allowed]
        strings = sorted(
            {
                v
                for turn in self.ground_truth
                for c in turn
                for v in _values(c)
                if isinstance(v, str)
            }
        )
        candidates: list[Call] = []
        order: list[int] = rng.permutation(len(pool)).tolist() if pool else []
        for index in order:
            base = pool[int(index)]
            candidates.extend(_mutations(base, strings, rng))
            candidates.extend(self._sibling_calls(base, allowed, rng))
        candidates.extend(self._zero_arg_calls(allowed))
        for call in candidates:
            if self._is_wrong(call, outstanding):
                return render_calls([call])
        # Nothing better: a documented zero-argument call or a mutated call, still a call.
        return render_calls([candidates[0]]) if candidates else "[pwd()]"

    def _is_wrong(self, call: Call, outstanding: list[Call]) -> bool:
        try:
            self.agent.bind(call)
        except (TypeError, DispatchError):
            return False
        gt = self.ground_truth[self.progress.turn_index]
        return self._match(call, gt, self.progress.outstanding) is None or not outstanding

    def _sibling_calls(self, base: Call, allowed: set[str], rng: np.random.Generator) -> list[Call]:
        owner = self.agent.owner_of(base.name)
        try:
            bound = self.agent.bind(base)
        except (TypeError, DispatchError):
            return []
        out: list[Call] = []
        for doc in self.docs.get(owner or "", []):
            name = doc["name"]
            if name == base.name or name not in allowed:
                continue
            required = doc["parameters"].get("required", [])
            if all(r in bound for r in required):
                out.append(Call(name, (), {r: bound[r] for r in required}))
        if out:
            out = [out[int(i)] for i in rng.permutation(len(out))]
        return out

    def _zero_arg_calls(self, allowed: set[str]) -> list[Call]:
        return [
            Call(doc["name"])
            for c in self.entry.involved_classes
            for doc in self.docs[c]
            if doc["name"] in allowed and not doc["parameters"].get("required")
        ]

    # ------------------------------------------------------------------ snapshots
    def snapshot(self) -> dict[str, Any]:
        return {
            "agent": self.agent.snapshot(),
            "reference": self.reference.snapshot(),
            "progress": dataclasses.asdict(self.progress),
        }

    def restore(self, state: dict[str, Any]) -> None:
        self.agent.restore(state["agent"])
        self.reference.restore(state["reference"])
        self.progress = _Progress(**copy.deepcopy(state["progress"]))

    def state_key(self) -> str:
        """Equal backend states at the same point of the entry give equal keys."""
        p = self.progress
        payload = {
            "entry": self.entry.id,
            "turn": p.turn_index,
            "outstanding": p.outstanding,
            "calls": p.calls_this_turn > 0,
            "results": sorted(p.all_results),
            "state": _canonical(self.agent.public_state()),
        }
        blob = json.dumps(payload, sort_keys=True, default=str)
        return hashlib.sha1(blob.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def _values(call: Call) -> list[Any]:
    return [*call.args, *call.kwargs.values()]


def _mutations(base: Call, strings: list[str], rng: np.random.Generator) -> list[Call]:
    """Copies of ``base`` with one argument value changed to a plausible wrong one."""
    out: list[Call] = []
    slots: list[tuple[str, Any]] = [(f"#{i}", v) for i, v in enumerate(base.args)]
    slots += list(base.kwargs.items())
    for slot_index in rng.permutation(len(slots)) if slots else []:
        slot, value = slots[int(slot_index)]
        for wrong in _wrong_values(value, strings, rng):
            args = list(base.args)
            kwargs = dict(base.kwargs)
            if slot.startswith("#"):
                args[int(slot[1:])] = wrong
            else:
                kwargs[slot] = wrong
            out.append(Call(base.name, tuple(args), kwargs))
    return out


def _wrong_values(value: Any, strings: list[str], rng: np.random.Generator) -> list[Any]:
    if isinstance(value, bool):
        return [not value]
    if isinstance(value, int):
        return [value + int(rng.integers(1, 4)), value - 1]
    if isinstance(value, float):
        return [round(value * 1.5 + 1.0, 2)]
    if isinstance(value, str):
        others = [s for s in strings if s != value]
        picked = [others[int(i)] for i in rng.permutation(len(others))[:2]] if others else []
        return [*picked, f"{value}_old" if value else "untitled"]
    if isinstance(value, list) and value:
        return [value[:-1]]
    return []


def _canonical(value: Any, depth: int = 0) -> Any:
    """A JSON-able, id-free rendering of backend state (objects by their public attributes).

    The agent's state is within :class:`StateLimits` (checked after each of its calls), so the
    recursion is bounded by ``max_depth`` and the rendering by ``max_nodes``; the depth cut
    below is a second guard that no state within the default limits reaches.
    """
    if depth > 80:
        return "..."
    if isinstance(value, dict):
        return {str(k): _canonical(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple | set):
        items = [_canonical(v, depth + 1) for v in value]
        return sorted(items, key=repr) if isinstance(value, set) else items
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if hasattr(value, "__dict__"):
        return {
            type(value).__name__: {
                k: _canonical(v, depth + 1)
                for k, v in vars(value).items()
                if not k.startswith("_") and k != "parent"
            }
        }
    return repr(value)


__all__ = ["END_OF_TURN_REPLY", "CallParseError", "MultiTurnEpisode", "TurnVerdict"]
