"""Teacher-forced log-probs equal the log-probs recorded at generation, one pass per trajectory."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from llm_support import request

from multiturn_envs.policies.base import Reply
from multiturn_envs.policies.sampling import Sampling
from multiturn_envs.policies.scoring import TransformersScorer, span_sums
from multiturn_envs.policies.token_sequences import ScoringSequence, trajectory_sequences
from multiturn_envs.policies.transformers_backend import TransformersPolicy


def play(tiny: tuple[Any, Any], seed: int, turns: int, sampling: Sampling) -> list[Reply]:
    model, tok = tiny
    pol = TransformersPolicy(model, tok, sampling)
    msgs = [{"role": "user", "content": f"Task {seed}: reach the goal. Action?"}]
    replies = []
    for turn in range(turns):
        (reply,) = pol.act([request(msgs, seed=seed * 100 + turn, episode_id=f"ep{seed}")])
        replies.append(reply)
        msgs += [
            {"role": "assistant", "content": reply.text},
            {"role": "user", "content": f"You moved. Turn {turn + 1}."},
        ]
    return replies


@settings(max_examples=6)
@given(
    seed=st.integers(0, 10**6),
    turns=st.integers(1, 3),
    temperature=st.sampled_from([0.0, 0.7, 1.0, 1.5]),
    top_p=st.sampled_from([1.0, 0.9]),
)
def test_scored_logprobs_equal_generation_logprobs(
    tiny_lm: tuple[Any, Any], seed: int, turns: int, temperature: float, top_p: float
) -> None:
    """Raw log-probs (T=1, before top-p) at generation == teacher forcing of the whole episode."""
    replies = play(
        tiny_lm, seed, turns, Sampling(temperature=temperature, top_p=top_p, max_tokens=10)
    )
    seqs = trajectory_sequences(replies)
    assert len(seqs) == 1 and len(seqs[0].spans) == turns
    scored = TransformersScorer(tiny_lm[0]).score(seqs)[0]
    for span, reply in zip(scored, replies):
        assert span == pytest.approx(reply.logprobs, abs=1e-4)


def test_one_pass_equals_per_turn_scoring_and_batching_changes_nothing(
    tiny_lm: tuple[Any, Any],
) -> None:
    episodes = [play(tiny_lm, s, 3, Sampling(max_tokens=8)) for s in (1, 2, 3)]
    whole = [trajectory_sequences(e)[0] for e in episodes]
    scorer = TransformersScorer(tiny_lm[0])
    together = scorer.score(whole)
    one_by_one = TransformersScorer(tiny_lm[0], max_batch_tokens=1).score(whole)
    for a, b in zip(together, one_by_one):
        for x, y in zip(a, b):
            assert x == pytest.approx(y, abs=1e-5)
    # per turn: score the prefix up to each action on its own (the O(T^2) way)
    seq = whole[0]
    for k, (a, b) in enumerate(seq.spans):
        prefix = ScoringSequence(seq.token_ids[:b], [(a, b)])
        assert scorer.score([prefix])[0][0] == pytest.approx(together[0][k], abs=1e-5)
    sums = span_sums(together)
    assert sums[0] == pytest.approx([sum(r.logprobs or []) for r in episodes[0]], abs=1e-3)


def test_another_models_actions_score_by_re_tokenising_them(
    tiny_lm: tuple[Any, Any], tmp_path: Any
) -> None:
    """NLL of policy A's actions under model B: B's own template and tokenisation of the text."""
    from multiturn_envs.rl.tiny_lm import build_tiny_chat_model, load_tiny_chat_model

    replies = play(tiny_lm, 5, 2, Sampling(max_tokens=8))
    model_b, tok_b = load_tiny_chat_model(build_tiny_chat_model(tmp_path / "b", seed=1))
    pol_b = TransformersPolicy(model_b, tok_b)
    conv = pol_b.prompter.conversation(
        request(
            [
                {"role": "user", "content": "Task 5: reach the goal. Action?"},
                {"role": "assistant", "content": replies[0].text},
                {"role": "user", "content": "You moved. Turn 1."},
                {"role": "assistant", "content": replies[1].text},
            ]
        )
    )
    seq = pol_b.prompter.sequence_of(conv)
    scored = TransformersScorer(model_b).score([seq])[0]
    assert [len(s) for s in scored] == [b - a for a, b in seq.spans]
    assert all(lp <= 0 for s in scored for lp in s)
    under_a = TransformersScorer(tiny_lm[0]).score([seq])[0]
    assert span_sums([scored]) != span_sums([under_a])  # different models, different numbers


def test_sequences_without_spans_score_to_nothing(tiny_lm: tuple[Any, Any]) -> None:
    assert TransformersScorer(tiny_lm[0]).score([ScoringSequence([1, 2, 3], [])]) == [[]]
    assert TransformersScorer(tiny_lm[0]).score([]) == []


class _RewritingView:
    """A tokenizer whose template renders assistant turns that a user turn follows differently
    (as templates that strip old reasoning do): no growing sequence holds a whole episode."""

    def __init__(self, tokenizer: Any) -> None:
        self._tokenizer = tokenizer

    def apply_chat_template(self, conversation: Any, **kwargs: Any) -> Any:
        users = [i for i, m in enumerate(conversation) if m["role"] == "user"]
        chat = [
            {**m, "content": "(earlier) " + m["content"]}
            if m["role"] == "assistant" and users and users[-1] > i
            else dict(m)
            for i, m in enumerate(conversation)
        ]
        return self._tokenizer.apply_chat_template(chat, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._tokenizer, name)


def test_a_template_that_rewrites_earlier_turns_is_scored_action_by_action(
    tiny_lm: tuple[Any, Any],
) -> None:
    from multiturn_envs.policies.prompting import ChatPrompter
    from multiturn_envs.policies.scoring import ScoringModel, TrajectoryText

    model, tok = tiny_lm
    prompter = ChatPrompter(_RewritingView(tok), system_prompt="")
    scoring = ScoringModel("m", "transformers", "float32", prompter, TransformersScorer(model))
    messages = [
        {"role": "user", "content": "Task: reach the goal."},
        {"role": "assistant", "content": "Left"},
        {"role": "user", "content": "You moved."},
        {"role": "assistant", "content": "Down"},
    ]
    trajectory = TrajectoryText("t", 0, False, messages, ["", ""], [1, 3])
    plan = scoring.sequences(trajectory)
    assert [actions for _, actions in plan] == [[0], [1]]  # one sequence per action
    (scored,) = scoring.score([trajectory])
    for k, upto in enumerate((1, 3)):  # each action after its context rendered as a whole
        context = prompter.render(messages[:upto], True)
        ids = prompter.encode(context)
        action = [*prompter.encode(messages[upto]["content"]), tok.eos_token_id]
        want = TransformersScorer(model).score(
            [ScoringSequence(ids + action, [(len(ids), len(ids) + len(action))])]
        )[0][0]
        assert scored[k] == pytest.approx(want, abs=1e-5)
    assert "(earlier) Left" in prompter.render(messages[:3], True)
