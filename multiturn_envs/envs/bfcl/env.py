"""MT/BFCL-v0: the Berkeley Function Calling Leaderboard as an interactive text environment."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np

from multiturn_envs.core import BudgetMode, StepOutcome, TextEnv
from multiturn_envs.envs.bfcl import single_turn
from multiturn_envs.envs.bfcl.ast_checker import check_single_turn
from multiturn_envs.envs.bfcl.calls import CallParseError, Decoded, decode
from multiturn_envs.envs.bfcl.data import (
    Entry,
    MultiTurnEntry,
    SingleTurnEntry,
    expand_categories,
    function_docs,
    load_entries,
    resolve_source,
)
from multiturn_envs.envs.bfcl.multi_turn import MultiTurnEpisode, cut
from multiturn_envs.envs.bfcl.state_bounds import StateLimits
from multiturn_envs.tools import Tool, ToolCallError

JSON_TYPES: dict[str, str] = {
    "dict": "object",
    "object": "object",
    "float": "number",
    "double": "number",
    "number": "number",
    "integer": "integer",
    "int": "integer",
    "long": "integer",
    "short": "integer",
    "byte": "integer",
    "string": "string",
    "str": "string",
    "char": "string",
    "boolean": "boolean",
    "bool": "boolean",
    "array": "array",
    "list": "array",
    "tuple": "array",
}
"""BFCL's parameter types -> JSON schema types (BFCL's own FC conversion; "any" gets none)."""


def _json_schema(schema: Any) -> Any:
    """A BFCL parameter schema as JSON schema: its types mapped, everything else kept."""
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "type":
            mapped = JSON_TYPES.get(str(value).lower()) if isinstance(value, str) else None
            if mapped is not None:
                out["type"] = mapped
        elif key == "properties" and isinstance(value, dict):
            out["properties"] = {k: _json_schema(v) for k, v in value.items()}
        elif key == "items":
            out["items"] = _json_schema(value)
        else:
            out[key] = value
    return out


def tool_of_function(doc: dict[str, Any]) -> Tool:
    """One BFCL function doc as a typed tool (its name kept, dots included)."""
    parameters = _json_schema(doc.get("parameters") or {})
    parameters = {**parameters, "type": "object"}
    parameters.setdefault("properties", {})
    return Tool(str(doc["name"]), str(doc.get("description") or ""), parameters)


BFCL_STEP_LIMIT = 20
"""BFCL's ``MAXIMUM_STEP_LIMIT``: a user turn may take this many replies without ending; the
one after it still runs, then the entry is force-quit (BFCL's harness counts a step after
executing it and quits when the count *exceeds* the limit, i.e. after the 21st)."""

_INSTRUCTIONS = (
    "You are an expert in composing functions. You are given a question and a set of possible "
    "functions. Based on the question, you will need to make one or more function/tool calls to "
    "achieve the purpose. If none of the functions can be used, point it out. If the given "
    "question lacks the parameters required by the function, also point it out.\n\n"
    "If you decide to invoke any of the function(s), reply with only the calls, in the format "
    "[func_name1(params_name1=params_value1, params_name2=params_value2...), func_name2(params)] "
    '(JSON tool calls such as {"name": ..., "arguments": {...}} are accepted too).\n\n'
    "At each turn, you should try your best to complete the tasks requested by the user within "
    "the current turn. Continue to output functions to call until you have fulfilled the user's "
    "request to the best of your ability. Once you have no more functions to call, reply with a "
    "message without calls: the system will consider the current turn complete and proceed to "
    "the next turn or task."
)


class BFCLEnv(TextEnv):
    """BFCL tool calling: stateful multi-turn entries and single-turn AST entries.

    ## Description
    The agent sees a user's request and the function docs, replies with function calls, sees
    their results, and ends each user turn with a reply that holds no call; the next user message
    follows until the entry's turns are done. Multi-turn entries run on BFCL's stateful backends
    (file system, trading, travel, messaging, posting, tickets, vehicle, math) or on this
    project's bundled ones, one private set per episode. Single-turn entries are one user turn
    scored by BFCL's AST matching rules.

    ## Spaces
    Observation and action: ``str``. Actions are Python-call syntax ``[f(a=1), g(b='x')]`` (BFCL's
    default), JSON tool calls, or ``<tool_call>`` blocks calling the task's functions (its
    tools, :meth:`tools`: the functions shown so far, as JSON schemas); anything else is a
    message to the user (in a tool-calling episode too: such a reply ends the user turn).

    ## Rewards
    1.0 on the step that completes a passing entry, else 0.0.

    ## Episode End
    Terminated when the entry is decided: a user turn fails BFCL's check (multi-turn), the last
    user turn passes, the single-turn answer is given, or a user turn takes more than BFCL's 20
    replies (the 21st runs, then the entry is force-quit, as BFCL's harness does).
    Truncated when the turn budget is spent first (the entry then counts as failed).

    ## Arguments
    ``category`` (a category, a list, or ``"multi_turn"`` / ``"single_turn"`` / ``"all"``),
    ``source`` (``"auto"``, ``"bfcl-eval"``, ``"bundled"`` or a data directory), ``task_ids``
    (restrict to these ids), ``docs_in_observation`` (repeat the function docs in the first
    observation), ``max_steps_per_turn`` (BFCL's limit, ``None`` for none), ``max_turns``,
    ``budget_mode``, ``render_mode`` (``None`` or ``"ansi"``), and the resource contract
    (``docs/security.md``): ``max_calls_per_reply`` (64), ``max_result_chars`` (50,000 shown
    per result), ``max_observation_chars`` (200,000), ``state_limits``
    (:class:`~multiturn_envs.envs.bfcl.state_bounds.StateLimits`).

    ## Turn Budget
    One turn = one agent reply (calls or a turn-ending message). User turns are not budget turns:
    an entry with U user turns needs at least U + (turns with calls) replies; the expert needs
    2 replies per user turn with calls, 1 per turn without.

    ## Oracle
    ``step_score``: for a reply with calls, the fraction of its calls that match a ground-truth
    call still outstanding in this user turn; for a turn-ending reply, 1 if the turn's BFCL check
    passes now; for single-turn entries, 1 if the AST check passes. ``expert_action``: the
    outstanding ground-truth calls, then a turn-ending reply. ``error_action``: a wrong argument
    value or a wrong but existing function that executes (multi-turn), a schema-refused call
    (single-turn).

    ## Version History
    * v0: initial version (BFCL v4 data format, bfcl-eval 2026.3.23).
    """

    max_tool_calls = 32  # a turn's parallel calls
    check_tool_arguments = False  # BFCL's checker grades names and values: a wrong one is scored
    reply_without_call = "action"  # a message to the user ends the user turn, not the episode
    tools_change_in_episode = True  # miss_func entries release held-out functions

    def __init__(
        self,
        category: str | Sequence[str] = "multi_turn_base",
        source: str = "auto",
        task_ids: Sequence[str] | None = None,
        docs_in_observation: bool = True,
        max_steps_per_turn: int | None = BFCL_STEP_LIMIT,
        max_turns: int | None = 20,
        budget_mode: BudgetMode = "hidden",
        render_mode: str | None = None,
        max_calls_per_reply: int = 64,
        max_result_chars: int = 50_000,
        max_observation_chars: int = 200_000,
        state_limits: StateLimits | None = None,
    ) -> None:
        super().__init__(max_turns=max_turns, budget_mode=budget_mode, render_mode=render_mode)
        for name, value in (
            ("max_calls_per_reply", max_calls_per_reply),
            ("max_result_chars", max_result_chars),
            ("max_observation_chars", max_observation_chars),
        ):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        self.max_calls_per_reply = max_calls_per_reply
        self.max_result_chars = max_result_chars
        self.max_observation_chars = max_observation_chars
        self.state_limits = state_limits or StateLimits()
        if max_steps_per_turn is not None and not (
            isinstance(max_steps_per_turn, int) and max_steps_per_turn >= 1
        ):
            raise ValueError(
                f"max_steps_per_turn must be a positive int or None, got {max_steps_per_turn!r}"
            )
        self.categories = expand_categories(category)
        self.source = source
        _, self.data_version = resolve_source(source)
        entries = load_entries(source, self.categories)
        if task_ids is not None:
            wanted = set(task_ids)
            entries = [e for e in entries if e.id in wanted]
        if not entries:
            raise ValueError(f"no BFCL entries for categories {self.categories} in {source!r}")
        self._entries: dict[str, Entry] = {e.id: e for e in entries}
        self.docs_in_observation = docs_in_observation
        self.max_steps_per_turn = max_steps_per_turn
        self._entry: Entry | None = None
        self._episode: MultiTurnEpisode | None = None
        self._single_done = False

    # ------------------------------------------------------------------ tasks
    def task_ids(self) -> Sequence[str]:
        return list(self._entries)

    def entry(self, task_id: str | None = None) -> Entry:
        """The loaded entry ``task_id`` (default: the current one)."""
        key = task_id if task_id is not None else self._task_id
        if key is None or key not in self._entries:
            raise KeyError(f"unknown BFCL task id {key!r}")
        return self._entries[key]

    def _load_task(self, task_id: str, options: dict[str, Any]) -> str:
        if task_id not in self._entries:
            raise ValueError(f"unknown BFCL task id {task_id!r}")
        entry = self._entries[task_id]
        self._entry = entry
        self._single_done = False
        if isinstance(entry, MultiTurnEntry):
            docs = {c: function_docs(self.source, c) for c in entry.involved_classes}
            self._episode = MultiTurnEpisode(entry, docs, self.state_limits)
            first = self._episode.user_message(0)
            functions = self._episode.initial_docs()
        else:
            self._episode = None
            first = _user_text(entry.question[0])
            functions = entry.functions
        if not self.docs_in_observation:
            return first
        return f"Functions you can call (JSON):\n{json.dumps(functions)}\n\nUser: {first}"

    def system_prompt(self) -> str:
        if self._entry is None:
            return _INSTRUCTIONS
        if self._episode is not None:
            functions = self._episode.available_docs()
        else:
            assert isinstance(self._entry, SingleTurnEntry)
            functions = self._entry.functions
        return (
            f"{_INSTRUCTIONS}\n\nHere is a list of functions in JSON format that you can "
            f"invoke.\n{json.dumps(functions)}\n"
        )

    def tools(self) -> Sequence[Tool]:
        """The task's functions shown so far, as tools (``()`` before the first ``reset``)."""
        if self._entry is None:
            return ()
        if self._episode is not None:
            return tuple(tool_of_function(d) for d in self._episode.available_docs())
        assert isinstance(self._entry, SingleTurnEntry)
        return tuple(tool_of_function(d) for d in self._entry.functions)

    def _decode(self, action: str) -> Decoded:
        """BFCL's decoding of a reply; ``<tool_call>`` blocks go through BFCL's own JSON path."""
        calls = self.read_tool_calls(action)
        if calls is None:
            return decode(action)
        if isinstance(calls, ToolCallError):
            raise CallParseError(str(calls).removeprefix("Tool call error: "))
        return decode(json.dumps([{"name": c.name, "arguments": dict(c.arguments)} for c in calls]))

    # ------------------------------------------------------------------ dynamics
    def _step(self, action: str) -> StepOutcome:
        assert self._entry is not None
        if self._episode is not None:
            return self._step_multi(action, self._episode)
        return self._step_single(action, self._entry)

    def _base_info(self) -> dict[str, Any]:
        assert self._entry is not None
        return {"category": self._entry.category, "data_version": self._entry.data_version}

    def _step_multi(self, action: str, episode: MultiTurnEpisode) -> StepOutcome:
        p = episode.progress
        info = self._base_info()
        try:
            decoded = self._decode(action)
        except CallParseError as exc:
            message = f"Error: {exc}"
            return self._non_ending(episode, message, 0.0, parse_error=str(exc), info=info)
        if len(decoded.calls) > self.max_calls_per_reply:
            message = (
                f"the reply holds {len(decoded.calls)} calls; at most {self.max_calls_per_reply} "
                "are run per reply (nothing was run)"
            )
            return self._non_ending(
                episode, f"Error: {message}", 0.0, parse_error=message, info=info
            )
        if decoded.calls:
            lines, score, unknown = episode.run_calls(decoded.calls, self.max_result_chars)
            observation = cut("\n".join(lines), self.max_observation_chars)
            problem = "a call names a function you were not given" if unknown else None
            return self._non_ending(episode, observation, score, parse_error=problem, info=info)
        turn = p.turn_index
        verdict, score = episode.end_turn()
        info.update(
            {
                "user_turn": turn,
                "turn_check": verdict.valid,
                "turn_error_type": verdict.error_type or None,
            }
        )
        if p.finished:
            info["user_turn"] = turn
            if p.passed:
                return StepOutcome(
                    "All user requests of this entry are complete.",
                    1.0,
                    True,
                    True,
                    score,
                    info=info,
                )
            return StepOutcome(
                f"The entry failed at user turn {turn}: {verdict.message}.",
                0.0,
                True,
                False,
                score,
                info=info,
            )
        return StepOutcome(
            f"User: {episode.user_message(p.turn_index)}",
            0.0,
            False,
            False,
            score,
            info={**info, "user_turn": p.turn_index},
        )

    def _non_ending(
        self,
        episode: MultiTurnEpisode,
        observation: str,
        score: float,
        *,
        parse_error: str | None,
        info: dict[str, Any],
    ) -> StepOutcome:
        p = episode.progress
        p.replies_this_turn += 1
        info["user_turn"] = p.turn_index
        limit = self.max_steps_per_turn
        if limit is not None and p.replies_this_turn > limit:
            episode.fail("multi_turn:force_quit")
            info["turn_error_type"] = "multi_turn:force_quit"
            observation += f"\n\nThe entry failed: more than {limit} replies in one user turn."
            return StepOutcome(observation, 0.0, True, False, score, parse_error, info)
        return StepOutcome(observation, 0.0, False, False, score, parse_error, info)

    def _refuse(self, message: str) -> StepOutcome:
        """A reply refused unread (too long): a malformed reply (the user turn goes on)."""
        info = self._base_info()
        if self._episode is not None:
            return self._non_ending(
                self._episode, f"Error: {message}", 0.0, parse_error=message, info=info
            )
        return StepOutcome(f"Error: {message}", 0.0, False, False, 0.0, message, info)

    def _step_single(self, action: str, entry: Entry) -> StepOutcome:
        assert isinstance(entry, SingleTurnEntry)
        info = self._base_info()
        try:
            decoded = self._decode(action)
        except CallParseError as exc:
            return StepOutcome(f"Error: {exc}", 0.0, False, False, 0.0, str(exc), info)
        problem = single_turn.schema_problem(entry, decoded.calls)
        if problem is not None:
            return StepOutcome(f"Error: {problem}", 0.0, False, False, 0.0, problem, info)
        result = check_single_turn(
            entry.functions, decoded.calls, entry.ground_truth, entry.category
        )
        self._single_done = True
        info.update({"ast_valid": result.valid, "ast_error_type": result.error_type or None})
        if result.valid:
            return StepOutcome("Correct.", 1.0, True, True, 1.0, info=info)
        return StepOutcome(f"Incorrect: {result.message}.", 0.0, True, False, 0.0, info=info)

    # ------------------------------------------------------------------ snapshots and oracle
    def _get_state(self) -> Any:
        return {
            "episode": self._episode.snapshot() if self._episode is not None else None,
            "single_done": self._single_done,
        }

    def _set_state(self, state: Any) -> None:
        entry = self.entry(self._task_id)
        self._entry = entry
        self._single_done = state["single_done"]
        if state["episode"] is None:
            self._episode = None
            return
        if self._episode is None or self._episode.entry.id != entry.id:
            assert isinstance(entry, MultiTurnEntry)
            docs = {c: function_docs(self.source, c) for c in entry.involved_classes}
            self._episode = MultiTurnEpisode(entry, docs, self.state_limits)
        self._episode.restore(state["episode"])

    def expert_action(self) -> str:
        self._require_live()
        if self._episode is not None:
            return self._episode.expert_reply()
        assert isinstance(self._entry, SingleTurnEntry)
        return single_turn.expert_reply(self._entry)

    def error_action(self, rng: np.random.Generator) -> str:
        self._require_live()
        if self._episode is not None:
            return self._episode.error_reply(rng)
        assert isinstance(self._entry, SingleTurnEntry)
        return single_turn.error_reply(self._entry, rng)

    def state_key(self) -> str:
        if self._episode is not None and not self._needs_reset:
            return self._episode.state_key()
        return super().state_key()

    def _close(self) -> None:
        self._episode = None


def _user_text(messages: list[dict[str, str]]) -> str:
    return "\n".join(m["content"] for m in messages if m.get("role") != "system") or "\n".join(
        m["content"] for m in messages
    )
