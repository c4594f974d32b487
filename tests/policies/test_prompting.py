"""The shared prompting layer: seeds, sampling settings, action extraction, incremental ids."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from llm_support import request

from multiturn_envs.policies.action_extractor import ActionExtractor
from multiturn_envs.policies.base import Reply
from multiturn_envs.policies.conversation import DEFAULT_SYSTEM_PROMPT
from multiturn_envs.policies.prompting import ChatPrompter, Completion, _EncodeCache
from multiturn_envs.policies.sampling import Sampling, cut_at_stop, sample_seed_base
from multiturn_envs.policies.token_sequences import ScoringSequence, trajectory_sequences


# ----------------------------------------------------------------------------- seeds, sampling
@given(st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1))
def test_seed_bases_are_62_bit_and_far_apart(a: int, b: int) -> None:
    ba, bb = sample_seed_base(a), sample_seed_base(b)
    assert 0 <= ba < 2**62 and ba == sample_seed_base(a)
    if a != b:  # children base+i of n <= 2**16 samples never overlap across requests
        assert abs(ba - bb) >= 2**16


def test_adjacent_request_seeds_do_not_share_children() -> None:
    """The vLLM pitfall: (n=4, seed=10) and (n=4, seed=11) share 3 children; ours share none."""
    children = {sample_seed_base(s) + i for s in range(200) for i in range(16)}
    assert len(children) == 200 * 16


def test_negative_seed_is_refused() -> None:
    with pytest.raises(ValueError, match="non-negative"):
        sample_seed_base(-1)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"temperature": -0.1},
        {"top_p": 0.0},
        {"top_p": 1.5},
        {"top_k": -1},
        {"max_tokens": 0},
        {"stop": ("",)},
    ],
)
def test_bad_sampling_settings_are_refused(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        Sampling(**kwargs)


# ----------------------------------------------------------------------------- actions
def test_extractor_strips_thinking_and_whitespace() -> None:
    ex = ActionExtractor()
    assert ex("<think>go left?</think>\n  right \n") == "right"
    assert ex("<think>still thinking about it") == ""
    assert ex("a</think>b") == "ab"


def test_extractor_pattern_takes_the_last_match_or_passes_text_through() -> None:
    ex = ActionExtractor(pattern=r"Action:\s*(\w+)")
    assert ex("Action: up ... no. Action: down") == "down"
    assert ex("I refuse") == "I refuse"  # the env answers the malformed action itself


@given(st.text(max_size=80))
def test_extractor_never_raises_and_output_is_stripped(text: str) -> None:
    out = ActionExtractor()(text)
    assert out == out.strip()
    assert "<think>" not in out


@given(st.text(max_size=60), st.lists(st.text(min_size=1, max_size=3), max_size=3))
def test_cut_at_stop_cuts_before_the_earliest_stop(text: str, stop: list[str]) -> None:
    cut, hit = cut_at_stop(text, stop)
    assert text.startswith(cut)
    assert hit == any(s in text for s in stop)
    assert not any(s in cut for s in stop)


# ----------------------------------------------------------------------------- conversation
def test_system_prompt_priority(tiny_lm: tuple[Any, Any]) -> None:
    _, tok = tiny_lm
    msgs = [{"role": "user", "content": "obs"}]
    assert ChatPrompter(tok).conversation(request(msgs, system="env says"))[0] == {
        "role": "system",
        "content": "env says",
    }
    assert ChatPrompter(tok).conversation(request(msgs, system=""))[0]["content"] == (
        DEFAULT_SYSTEM_PROMPT
    )
    assert ChatPrompter(tok, system_prompt="mine").conversation(request(msgs))[0]["content"] == (
        "mine"
    )
    assert ChatPrompter(tok, system_prompt="").conversation(request(msgs)) == msgs
    folded = ChatPrompter(tok, system_prompt="S", fold_system=True).conversation(request(msgs))
    assert folded == [{"role": "user", "content": "S\n\nobs"}]


# ----------------------------------------------------------------------------- incremental ids
def _play(prompter: ChatPrompter, completions: list[list[int]], eid: str = "e") -> list[Reply]:
    """Drive one episode: each turn's completion ids are given; the env echoes the turn."""
    tok = prompter.tokenizer
    msgs = [{"role": "user", "content": "You are at the start."}]
    replies = []
    for turn, ids in enumerate(completions):
        prompt = prompter.prompt(request(msgs, seed=turn, episode_id=eid))
        text = tok.decode([t for t in ids if t != tok.eos_token_id])
        finish = "stop" if ids and ids[-1] == tok.eos_token_id else "length"
        reply = prompter.finish(
            request(msgs, seed=turn, episode_id=eid), prompt, Completion(ids, None, text, finish)
        )
        replies.append(reply)
        msgs += [
            {"role": "assistant", "content": reply.text},
            {"role": "user", "content": f"Turn {turn} done.\nWhat next?"},
        ]
    return replies


@settings(max_examples=25)
@given(
    st.lists(
        st.tuples(st.lists(st.integers(3, 511), max_size=8), st.booleans()), min_size=1, max_size=4
    )
)
def test_each_prompt_extends_the_previous_prompt_and_completion(
    tiny_lm: tuple[Any, Any],
    turns: list[tuple[list[int], bool]],
) -> None:
    _, tok = tiny_lm
    prompter = ChatPrompter(tok)
    completions = [ids + ([tok.eos_token_id] if eos else []) for ids, eos in turns]
    replies = _play(prompter, completions)
    seqs = trajectory_sequences(replies)
    assert len(seqs) == 1
    (seq,) = seqs
    for (a, b), reply, ids in zip(seq.spans, replies, completions):
        assert seq.token_ids[a:b] == ids == reply.token_ids  # generated ids kept verbatim
    for reply in replies[1:]:
        assert reply.meta["prompt_continued"]
    # the template's text between turns is there exactly once: the EOS is never doubled
    text = tok.decode(seq.token_ids)
    assert text.count("<|im_start|>user") == len(completions)
    assert text.count("<|im_end|><|im_end|>") == 0


@settings(max_examples=25)
@given(
    st.lists(
        st.tuples(st.lists(st.integers(3, 511), max_size=8), st.booleans()), min_size=1, max_size=4
    )
)
def test_a_warm_prompter_builds_the_prompts_a_fresh_one_does(
    tiny_lm: tuple[Any, Any],
    turns: list[tuple[list[int], bool]],
) -> None:
    """The encode cache and the kept prompt text (a turn renders twice, not thrice) change
    nothing: an episode replayed on a prompter that has seen it gets the same ids as on a
    fresh one, and each prompt's kept text is the template's rendering."""
    _, tok = tiny_lm
    completions = [ids + ([tok.eos_token_id] if eos else []) for ids, eos in turns]
    warm = ChatPrompter(tok)
    _play(warm, completions, eid="first")
    again = _play(warm, completions, eid="second")
    fresh = _play(ChatPrompter(tok), completions)
    assert [r.meta for r in again] == [r.meta for r in fresh]
    msgs = [{"role": "user", "content": "You are at the start."}]
    prompt = warm.prompt(request(msgs, episode_id="third"))
    assert prompt.text == warm.render(prompt.conversation, True)


@settings(max_examples=50)
@given(st.lists(st.text(max_size=12), max_size=40), st.integers(1, 40))
def test_the_encode_cache_is_exact_and_bounded(texts: list[str], max_ids: int) -> None:
    cache = _EncodeCache(max_ids=max_ids)
    calls: list[str] = []

    def encode(text: str) -> list[int]:  # one id per character: the bound is easy to see
        calls.append(text)
        return [ord(c) for c in text]

    for text in texts:
        ids = cache.get(text, encode)
        assert ids == [ord(c) for c in text]
        ids.append(-1)  # the caller owns what it got: the cache keeps its own copy
        assert cache.get(text, encode) == [ord(c) for c in text]
        assert 0 <= cache._held <= max_ids
        assert cache._held == sum(len(v) for v in cache._ids.values())
    short = [t for t in texts if len(t) <= max_ids // 4]
    if short and max_ids >= 4:  # the last short text is still held: a hit encodes nothing
        before = len(calls)
        cache.get(short[-1], encode)
        assert len(calls) == before


def test_canonical_completions_render_like_the_template(tiny_lm: tuple[Any, Any]) -> None:
    """When the model's ids are what the tokenizer would give, incremental == re-rendered text."""
    _, tok = tiny_lm
    prompter = ChatPrompter(tok)
    actions = ["left", "go down 3", "right"]
    completions = [[*tok.encode(a, add_special_tokens=False), tok.eos_token_id] for a in actions]
    replies = _play(prompter, completions)
    conv = prompter.conversation(request([{"role": "user", "content": "You are at the start."}]))
    for turn, action in enumerate(actions):
        conv += [
            {"role": "assistant", "content": action},
            {"role": "user", "content": f"Turn {turn} done.\nWhat next?"},
        ]
    (seq,) = trajectory_sequences(replies)
    rendered = prompter.render(conv[:-1], False)
    assert tok.decode(seq.token_ids) + "\n" == rendered  # minus the "\n" never generated
    assert prompter.sequence_of(conv[:-1]).token_ids == seq.token_ids


def test_non_canonical_ids_survive_where_re_tokenising_would_merge_them(
    tiny_lm: tuple[Any, Any],
) -> None:
    _, tok = tiny_lm
    word = next(
        w
        for w in ["left", "right", "down", "frozen", "SELECT"]
        if len(tok.encode(w, add_special_tokens=False)) == 1
    )
    split = tok.encode(word[:1], add_special_tokens=False) + tok.encode(
        word[1:], add_special_tokens=False
    )
    assert split != tok.encode(word, add_special_tokens=False)
    prompter = ChatPrompter(tok)
    replies = _play(prompter, [[*split, tok.eos_token_id], [tok.eos_token_id]])
    (seq,) = trajectory_sequences(replies)
    assert seq.token_ids[seq.spans[0][0] : seq.spans[0][1]] == [*split, tok.eos_token_id]
    retokenised = prompter.sequence_of(
        [
            *prompter.conversation(request([{"role": "user", "content": "You are at the start."}])),
            {"role": "assistant", "content": word},
        ]
    )
    a, b = retokenised.spans[0]
    whole = tok.encode(word, add_special_tokens=False)
    assert retokenised.token_ids[a:b] == [*whole, tok.eos_token_id]
    assert retokenised.token_ids[a:b] != [*split, tok.eos_token_id]


def test_a_history_that_differs_from_the_kept_one_is_re_rendered(tiny_lm: tuple[Any, Any]) -> None:
    _, tok = tiny_lm
    prompter = ChatPrompter(tok)
    msgs = [{"role": "user", "content": "start"}]
    first = prompter.prompt(request(msgs, episode_id="x"))
    prompter.finish(
        request(msgs, episode_id="x"),
        first,
        Completion(tok.encode("up", add_special_tokens=False), None, "up", "length"),
    )
    edited = [*msgs, {"role": "assistant", "content": "down"}, {"role": "user", "content": "ok"}]
    again = prompter.prompt(request(edited, episode_id="x"))
    assert not again.continued
    assert again.token_ids == tok.encode(
        prompter.render(again.conversation, True), add_special_tokens=False
    )
    # a new episode under the same id (a reset) starts over too
    assert not prompter.prompt(request(msgs, episode_id="x")).continued


def test_kept_episodes_are_bounded(tiny_lm: tuple[Any, Any]) -> None:
    _, tok = tiny_lm
    prompter = ChatPrompter(tok, max_episodes=2)
    for eid in "abc":
        _play(prompter, [[5]], eid=eid)
    assert sorted(prompter._ledgers) == ["b", "c"]
    prompter.forget("b")
    assert sorted(prompter._ledgers) == ["c"]


def test_trajectory_sequences_refuse_replies_of_different_episodes(
    tiny_lm: tuple[Any, Any],
) -> None:
    _, tok = tiny_lm
    a = _play(ChatPrompter(tok), [[5], [6]], eid="a")
    b = _play(ChatPrompter(tok), [[7, 7, 7], [8]], eid="b")
    with pytest.raises(ValueError, match="consecutive turns"):
        trajectory_sequences([a[0], b[1]])
    with pytest.raises(ValueError, match="without token ids"):
        trajectory_sequences([Reply(text="x")])


def test_scoring_sequence_validates_spans() -> None:
    with pytest.raises(ValueError, match="span"):
        ScoringSequence([1, 2, 3], [(0, 2)])
    with pytest.raises(ValueError, match="span"):
        ScoringSequence([1, 2, 3], [(2, 5)])
    assert ScoringSequence([1, 2, 3], [(1, 3)]).spans == [(1, 3)]


def test_a_tokenizer_without_template_is_refused(tiny_lm: tuple[Any, Any]) -> None:
    _, tok = tiny_lm
    import copy

    bare = copy.copy(tok)
    bare.chat_template = None
    with pytest.raises(ValueError, match="chat template"):
        ChatPrompter(bare)
