"""The response cache: a rerun or a resume pays nothing for calls made before and writes the
same records; several processes share one file; a file the cache did not make is refused and
left as it is; a file damaged while in use costs calls, never the run; the bounds hold."""

from __future__ import annotations

import json
import multiprocessing
import os
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from multiturn_envs.errors import SpecError, UntrustedInputError
from multiturn_envs.harness import EvalConfig, read_run, run_eval
from multiturn_envs.policies import ResponseCache, load_policy
from multiturn_envs.policies.response_cache import folder_revision

IDENTITY = {"engine": "test", "model": "m", "revision": "r1"}


def _strip(record: dict[str, Any]) -> dict[str, Any]:
    """A record without what differs between two runs of the same episodes (clock times)."""
    out = dict(record)
    out.pop("timings", None)
    return out


# ---------------------------------------------------------------------- the store
def test_a_value_comes_back_and_a_miss_is_none(tmp_path: Path) -> None:
    with ResponseCache(tmp_path / "c.sqlite") as cache:
        key = cache.key(IDENTITY, {"prompt_ids": [1, 2, 3], "seed": 7})
        assert cache.get(key) is None
        assert cache.put(key, {"answer": ["é", 1.5, None]})
        assert cache.get(key) == {"answer": ["é", 1.5, None]}
        assert (cache.hits, cache.misses, cache.stored) == (1, 1, 1)
    with ResponseCache(tmp_path / "c.sqlite") as again:  # on disk: a new process finds it
        assert again.get(key) == {"answer": ["é", 1.5, None]}


questions = st.dictionaries(
    st.sampled_from(["prompt_ids", "seed", "sampling", "messages", "tools", "n"]),
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=5),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner),
        max_leaves=8,
    ),
    max_size=4,
)


@settings(max_examples=200, deadline=None)
@given(a=questions, b=questions)
def test_keys_are_equal_exactly_for_equal_questions(a: dict[str, Any], b: dict[str, Any]) -> None:
    same = json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
    assert (ResponseCache.key(IDENTITY, a) == ResponseCache.key(IDENTITY, b)) == same
    # the order of a dict's keys is no part of the question
    assert ResponseCache.key(IDENTITY, dict(reversed(list(a.items())))) == ResponseCache.key(
        IDENTITY, a
    )


def test_every_part_of_the_identity_and_the_question_is_in_the_key() -> None:
    question = {"prompt_ids": [1, 2], "sampling": {"temperature": 1.0}, "seed": 3, "n": 1}
    base = ResponseCache.key(IDENTITY, question)
    for name, value in [("engine", "vllm"), ("model", "m2"), ("revision", "r2")]:
        assert ResponseCache.key({**IDENTITY, name: value}, question) != base
    for name, value in [
        ("prompt_ids", [1, 3]),
        ("sampling", {"temperature": 0.5}),
        ("seed", 4),
        ("n", 2),
    ]:
        assert ResponseCache.key(IDENTITY, {**question, name: value}) != base


def test_the_entry_count_and_byte_bounds_drop_the_least_recently_used(tmp_path: Path) -> None:
    cache = ResponseCache(tmp_path / "c.sqlite", max_entries=5, max_entry_bytes=1000)
    keys = [cache.key(IDENTITY, {"i": i}) for i in range(12)]
    for i, key in enumerate(keys[:5]):
        cache.put(key, i)
        time.sleep(0.002)
    assert cache.get(keys[0]) == 0  # used again: now the most recent
    for i, key in enumerate(keys[5:8], start=5):
        time.sleep(0.002)
        cache.put(key, i)
    assert len(cache) == 5
    assert cache.get(keys[0]) == 0 and cache.get(keys[1]) is None  # 1, 2, 3 were dropped
    assert not cache.put(keys[9], "x" * 2000)  # over max_entry_bytes: not kept
    assert cache.get(keys[9]) is None
    cache.close()
    small = ResponseCache(tmp_path / "s.sqlite", max_bytes=300)
    for i in range(20):
        small.put(small.key(IDENTITY, {"i": i}), "y" * 50)
    assert 1 <= len(small) <= 300 // 52
    small.close()


# ---------------------------------------------------------------------- several processes
def _writer(path: str, worker: int, n: int, out: Any) -> None:
    try:
        cache = ResponseCache(path, busy_timeout_s=60)
        for i in range(n):
            shared = i % 2 == 0  # half of the keys every worker writes, half its own
            question = {"i": i} if shared else {"i": i, "worker": worker}
            key = cache.key(IDENTITY, question)
            cache.put(key, {"question": question})
            got = cache.get(key)
            assert got == {"question": question}, got
        cache.close()
        out.put((worker, "ok"))
    except BaseException as exc:  # the parent asserts on what it gets back
        out.put((worker, f"{type(exc).__name__}: {exc}"))


def test_several_processes_write_one_file_at_once(tmp_path: Path) -> None:
    path = str(tmp_path / "shared.sqlite")
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    workers, n = 4, 60
    procs = [ctx.Process(target=_writer, args=(path, w, n, out)) for w in range(workers)]
    for proc in procs:  # all of them create-or-open the same missing file at once
        proc.start()
    results = [out.get(timeout=240) for _ in procs]
    for proc in procs:
        proc.join(timeout=60)
        assert proc.exitcode == 0
    assert sorted(results) == [(w, "ok") for w in range(workers)]
    cache = ResponseCache(path)
    assert len(cache) == n // 2 + workers * (n // 2)
    for w in range(workers):
        for i in range(1, n, 2):
            question = {"i": i, "worker": w}
            assert cache.get(cache.key(IDENTITY, question)) == {"question": question}
    cache.close()


# ---------------------------------------------------------------------- files that are not ours
def _foreign_sqlite(path: Path) -> None:
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE notes (body TEXT)")
    conn.execute("INSERT INTO notes VALUES ('my data')")
    conn.commit()
    conn.close()


@pytest.mark.parametrize("kind", ["text", "json", "foreign-sqlite", "empty", "directory", "fifo"])
def test_a_file_that_is_no_cache_is_refused_and_left_as_it_is(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "mine"
    if kind == "text":
        path.write_text("my notes\n", encoding="utf-8")
    elif kind == "json":
        path.write_text('{"a": 1}\n', encoding="utf-8")
    elif kind == "foreign-sqlite":
        _foreign_sqlite(path)
    elif kind == "empty":
        path.write_bytes(b"")
        old = time.time() - 3600
        os.utime(path, (old, old))  # nobody is setting it up right now
    elif kind == "directory":
        path.mkdir()
    else:
        os.mkfifo(path)
    before = path.read_bytes() if path.is_file() else None
    stat = os.lstat(path)
    with pytest.raises(UntrustedInputError) as info:
        ResponseCache(path)
    assert str(path) in str(info.value) and "left as it is" in str(info.value)
    if before is not None:
        assert path.read_bytes() == before
        assert os.lstat(path).st_mtime_ns == stat.st_mtime_ns
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine"]  # no -wal, no -journal


def test_a_link_is_not_followed(tmp_path: Path) -> None:
    target = tmp_path / "target.sqlite"
    ResponseCache(target).close()
    link = tmp_path / "link.sqlite"
    link.symlink_to(target)
    with pytest.raises(UntrustedInputError):
        ResponseCache(link)


def test_a_cache_damaged_while_in_use_costs_calls_not_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "c.sqlite"
    cache = ResponseCache(path)
    keys = [cache.key(IDENTITY, {"i": i}) for i in range(200)]
    for i, key in enumerate(keys):
        cache.put(key, "v" * 500 + str(i))
    cache.close()
    for suffix in ("-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    data = bytearray(path.read_bytes())
    data[4096:] = os.urandom(len(data) - 4096)  # every page but the first is garbage
    path.write_bytes(bytes(data))
    try:
        cache = ResponseCache(path)
    except UntrustedInputError as exc:  # found at open: refused with the file named
        assert str(path) in str(exc)
        return
    answers = [cache.get(k) for k in keys]  # found in use: misses, one warning, no exception
    assert cache.disabled and all(a is None for a in answers)
    assert not cache.put(keys[0], "new")
    assert capsys.readouterr().err.count("is damaged") == 1


def test_a_cache_travels_as_its_path(tmp_path: Path) -> None:
    import pickle

    cache = ResponseCache(tmp_path / "c.sqlite", max_entries=7)
    key = cache.key(IDENTITY, {"q": 1})
    cache.put(key, 1)
    copy = pickle.loads(pickle.dumps(cache))
    assert copy.max_entries == 7 and copy.get(key) == 1


def test_folder_revision_changes_with_the_files(tmp_path: Path) -> None:
    (tmp_path / "model.safetensors").write_bytes(b"a" * 10)
    first = folder_revision(tmp_path)
    assert folder_revision(tmp_path) == first
    (tmp_path / "model.safetensors").write_bytes(b"b" * 11)
    assert folder_revision(tmp_path) != first
    with pytest.raises(ValueError):
        folder_revision(tmp_path / "missing")


def test_a_cache_for_a_policy_that_calls_no_model_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="LLM policies"):
        load_policy("random", cache=str(tmp_path / "c.sqlite"))


# ---------------------------------------------------------------------- a real model, a real run
def test_a_rerun_and_a_resume_pay_nothing_and_write_the_same_records(
    tiny_dir: Path, tmp_path: Path
) -> None:
    from llm_support import require_llm_stack

    from multiturn_envs.policies.transformers_backend import TransformersPolicy

    require_llm_stack()
    config = EvalConfig("MT/FrozenLake-v0", "tiny", ["4x4", "random-s4-p0.8-n1"], 2, 3, seed=5)

    def policy(cache: Path | None) -> TransformersPolicy:
        return TransformersPolicy.from_pretrained(
            str(tiny_dir), cache=cache, name="tiny", max_batch_size=4
        )

    plain = tmp_path / "plain.jsonl"
    run_eval(config, policy(None), str(plain), progress=False)
    cache_file = tmp_path / "cache.sqlite"
    first = policy(cache_file)
    run_eval(config, first, str(tmp_path / "first.jsonl"), progress=False)
    assert first.cache is not None and first.cache.hits == 0 and first.cache.misses > 0
    again = policy(cache_file)
    run_eval(config, again, str(tmp_path / "again.jsonl"), progress=False)
    assert again.cache is not None
    assert again.cache.misses == 0 and again.cache.hits == first.cache.misses
    records = [
        [_strip(dict(r)) for r in read_run(tmp_path / name).records]
        for name in ("plain.jsonl", "first.jsonl", "again.jsonl")
    ]
    assert records[0] == records[1] == records[2]
    assert all(r["prompt_tokens"] and r["completion_tokens"] for r in records[2])
    # a resume: the file lost its last records (a killed run); the cache answers them
    partial = tmp_path / "resumed.jsonl"
    lines = (tmp_path / "first.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    partial.write_text("".join(lines[:3]), encoding="utf-8")
    resumed = policy(cache_file)
    summary = run_eval(config, resumed, str(partial), progress=False)
    assert summary.skipped == 2 and summary.written == 2
    assert resumed.cache is not None and resumed.cache.misses == 0
    assert sorted(
        json.dumps(_strip(dict(r)), sort_keys=True) for r in read_run(partial).records
    ) == sorted(json.dumps(r, sort_keys=True) for r in records[1])


def test_a_model_without_a_revision_cannot_be_cached(
    tiny_lm: tuple[Any, Any], tmp_path: Path
) -> None:
    from multiturn_envs.policies.transformers_backend import TransformersPolicy

    model, tokenizer = tiny_lm
    with pytest.raises(ValueError, match="revision"):
        TransformersPolicy(model, tokenizer, cache=tmp_path / "c.sqlite")
    policy = TransformersPolicy(model, tokenizer, cache=tmp_path / "c.sqlite", revision="v1")
    assert policy.cache_identity()["revision"] == "v1"
