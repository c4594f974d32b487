"""The verdict rules (Terminal-Bench's pytest summary parser, Harbor's reward files) and the task
formats' pure parts (Dockerfiles, solution turns), without an engine."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from multiturn_envs.envs.terminal.loading import (
    script_solution,
    solution_turns,
    solution_upload,
)
from multiturn_envs.envs.terminal.verdicts import (
    parse_pytest_summary,
    parse_reward,
    report_from_answer,
)
from multiturn_envs.envs.terminal.verify import why_reference_fails
from multiturn_envs.sandbox.checker import Check, CheckJob
from multiturn_envs.sandbox.dockerfile import (
    base_images,
    copy_args,
    light_plan,
    map_base,
    parse_dockerfile,
    parse_env,
    resolve_base,
    substitute,
)
from multiturn_envs.sandbox.task_images import (
    OFFLINE_BIN,
    explain_build_failure,
    mapped_dockerfile,
)

SUMMARY = """\
============================= test session starts ==============================
collected 3 items

../tests/test_outputs.py .F.                                               [100%]
=================================== FAILURES ===================================
E   AssertionError: nope - really
=========================== short test summary info ============================
PASSED ../tests/test_outputs.py::test_a
FAILED ../tests/test_outputs.py::test_b - AssertionError: nope
SKIPPED [1] ../tests/test_outputs.py:9: not here
XFAIL ../tests/test_outputs.py::test_c
========================= 1 failed, 1 passed in 0.12s ==========================
"""


def test_the_pytest_summary_is_read_as_terminal_bench_reads_it() -> None:
    results = parse_pytest_summary(SUMMARY)
    skipped = "[1] ../tests/test_outputs.py:9: not here"  # Terminal-Bench keys it so
    assert results == {"test_a": True, "test_b": False, "test_c": True, skipped: True}
    assert parse_pytest_summary("collected 0 items\n1 passed") is None  # no summary: an error
    # as in Terminal-Bench, a FAILED line's message is cut at its LAST " - " only
    two = "== short test summary info ==\nFAILED t.py::test_x - Error: a - b\n"
    assert parse_pytest_summary(two) == {"test_x - Error: a": False}


def test_only_the_text_after_the_first_summary_header_counts() -> None:
    # a "PASSED" line anywhere else (the agent's program printed it) is not a result
    text = "PASSED ../tests/test_outputs.py::test_b\n" + SUMMARY
    assert parse_pytest_summary(text) == parse_pytest_summary(SUMMARY)
    # a later line for the same test replaces an earlier one, as in Terminal-Bench
    header = "=========================== short test summary info ============================\n"
    forged = SUMMARY.replace(header, header + "PASSED t.py::test_b\n")
    assert parse_pytest_summary(forged)["test_b"] is False  # type: ignore[index]


@given(st.text(max_size=400))
def test_text_with_no_summary_header_never_passes(text: str) -> None:
    if "short test summary info" not in text.lower():
        assert parse_pytest_summary(text) is None


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["PASSED", "FAILED", "ERROR", "SKIPPED", "XPASS", "XFAIL"]),
            st.from_regex(r"test_[a-z]{1,6}", fullmatch=True),
        ),
        min_size=1,
        max_size=8,
    )
)
def test_a_test_passes_iff_its_last_status_passes(lines: list[tuple[str, str]]) -> None:
    text = "=== short test summary info ===\n" + "\n".join(
        f"{status} tests/t.py::{name}" for status, name in lines
    )
    results = parse_pytest_summary(text)
    assert results is not None
    last = {name: status for status, name in lines}
    assert results == {n: s in ("PASSED", "XFAIL", "SKIPPED") for n, s in last.items()}


def test_harbor_rewards_json_first_then_txt_and_refused_when_not_a_unit_number() -> None:
    assert parse_reward('{"reward": 1}', "0").value == 1.0
    assert parse_reward(None, "1\n").value == 1.0
    assert parse_reward(None, "0.25").value == 0.25
    assert parse_reward('{"accuracy": 0.5}', None).value == 0.5  # its only number
    for bad_json, bad_txt in [
        ('{"reward": 2}', None),
        ('{"reward": "1"}', None),
        ("[1, 2]", None),
        ("not json", None),
        ("", None),
        (None, "nan"),
        (None, "inf"),
        (None, "-1"),
        (None, "1 1"),
        (None, ""),
        (None, None),
    ]:
        reward = parse_reward(bad_json, bad_txt)
        assert reward.value is None and reward.problem, (bad_json, bad_txt)


def _job(verdict: str) -> CheckJob:
    return CheckJob((Check("t", "bash /tests/run-tests.sh"),), verdict=verdict, timeout_s=5)


@pytest.mark.parametrize(
    "reward_json",
    [
        "[" * 100_000,
        '{"a": ' * 5_000 + "1" + "}" * 5_000,
        '{"reward": ' + "[" * 70 + "1" + "]" * 70 + "}",
    ],
    ids=["100,000 brackets", "5,000 nested objects", "a reward 70 deep"],
)
def test_a_reward_file_nested_deep_is_refused_with_a_reason(reward_json: str) -> None:
    """Bound: reward.json (written by the tests, which may run the agent's code) is parsed
    within 64 KiB and 64 levels (``safejson``): a deep one is a failed verdict with its
    reason, never a RecursionError in the checker (before: RecursionError)."""
    reward = parse_reward(reward_json, None)
    assert reward.value is None and reward.problem is not None
    assert "refused" in reward.problem or "no reward" in reward.problem


def test_reports_follow_each_verdict_rule() -> None:
    answer = {"results": [{"name": "t", "passed": True, "output": SUMMARY, "timed_out": False}]}
    report = report_from_answer(answer, _job("pytest-summary"))
    assert report.score == pytest.approx(3 / 4) and not report.all_passed  # exit 0 is no verdict
    exit_zero = {"results": [{"name": "t", "passed": True, "output": "1 passed\n"}]}
    report = report_from_answer(exit_zero, _job("pytest-summary"))
    assert not report.all_passed and report.note and "no pytest summary" in report.note
    empty = {"results": [{"name": "t", "passed": True, "output": "== short test summary info =="}]}
    assert not report_from_answer(empty, _job("pytest-summary")).all_passed
    rewarded = {"results": [{"name": "t", "passed": False, "output": ""}], "reward_txt": "1"}
    assert report_from_answer(rewarded, _job("reward-file")).all_passed  # the file decides
    missing = {"results": [{"name": "t", "passed": True, "output": ""}]}
    report = report_from_answer(missing, _job("reward-file"))
    assert not report.all_passed and report.score == 0.0 and "no /logs/verifier" in str(report.note)
    error = report_from_answer({"error": "boom"}, _job("exit-status"))
    assert error.score == 0.0 and not error.all_passed


def test_dockerfiles_are_parsed_and_their_base_mapped() -> None:
    text = (
        "# syntax=docker/dockerfile:1\nARG BASE=img:1\nFROM --platform=x ${BASE} AS b\n"
        "RUN apt-get update && \\\n    # a comment inside\n    apt-get install -y git\n"
        'ENV A=1 B="two words"\nCOPY --chown=1:2 a b /dst/\n'
    )
    steps = parse_dockerfile(text)
    assert [s.keyword for s in steps] == ["ARG", "FROM", "RUN", "ENV", "COPY"]
    assert steps[2].args == "apt-get update && apt-get install -y git"
    assert resolve_base(steps, {}) == "img:1" and resolve_base(steps, {"BASE": "x:2"}) == "x:2"
    mapped, replaced = map_base(text, "mine:latest")
    assert replaced == ["${BASE}"] and "FROM --platform=x mine:latest AS b" in mapped
    assert parse_env('A=1 B="two words"') == {"A": "1", "B": "two words"}
    assert parse_env("A hello world") == {"A": "hello world"}
    assert copy_args('--chown=1:2 ["a b", "/x/"]') == ({"chown": "1:2"}, ["a b"], "/x/")
    assert substitute("$HOME/${X:-d}/${Y}", {"HOME": "/r", "Y": "y"}) == "/r/d/y"


# Terminal-Bench 2.0's financial-document-processor (two stages, uv copied from its image)
TWO_STAGES = """\
# a comment
FROM ubuntu:24.04 as build
COPY --from=ghcr.io/astral-sh/uv:0.8.14 /uv /uvx /bin/
COPY randomize_filenames.py /root
RUN uv run /root/randomize_filenames.py

FROM ubuntu:24.04 AS target
COPY --from=ghcr.io/astral-sh/uv:0.8.14 /uv /uvx /bin/
COPY --from=build /app/documents /app/documents
WORKDIR /app
"""


def test_every_dockerfile_shape_has_its_images_found_and_mapped() -> None:
    assert base_images(TWO_STAGES) == ["ubuntu:24.04", "ghcr.io/astral-sh/uv:0.8.14"]
    assert base_images("FROM python:3.13-slim-bookworm\nWORKDIR /app\n") == [
        "python:3.13-slim-bookworm"
    ]
    # a FROM of an earlier stage is no image; ARG defaults and build arguments fill FROM in
    chained = (
        "ARG B=img:1\nFROM ${B} AS one\nFROM one\nCOPY --from=0 /a /a\nCOPY --from=x:2 /b /b\n"
    )
    assert base_images(chained) == ["img:1", "x:2"]
    assert base_images(chained, {"B": "mine:3"}) == ["mine:3", "x:2"]
    mapped, replaced = mapped_dockerfile(TWO_STAGES, "base:9")
    assert replaced == ["ubuntu:24.04", "ghcr.io/astral-sh/uv:0.8.14"]
    lines = mapped.splitlines()
    assert "FROM base:9 as build" in lines and "FROM base:9 AS target" in lines
    # each mapped stage gets the stand-ins first on PATH for its steps
    assert lines.count(f"ENV PATH={OFFLINE_BIN}:/usr/local/bin:/usr/bin:/bin") == 2
    # uv comes from the stand-ins of the base; a stage's own COPY --from stays
    stand_ins = f"COPY --from=base:9 {OFFLINE_BIN}/uv {OFFLINE_BIN}/uvx /bin/"
    assert lines.count(stand_ins) == 2
    assert "COPY --from=build /app/documents /app/documents" in lines
    # what cannot be mapped is left for the build to refuse (its base cannot be pulled)
    other, _ = mapped_dockerfile("FROM a:1\nCOPY --from=b:2 /tool /bin/\n", "base:9")
    assert "COPY --from=b:2 /tool /bin/" in other.splitlines()
    # mapping a mapped file changes nothing more; a single stage maps its one FROM
    single, replaced = map_base("FROM python:3.13-slim-bookworm\nWORKDIR /app\n", "base:9")
    assert single == "FROM base:9\nWORKDIR /app\n" and replaced == ["python:3.13-slim-bookworm"]


@given(
    st.lists(
        st.tuples(st.sampled_from(["a:1", "b", "reg.io/x/y:2"]), st.booleans()),
        min_size=1,
        max_size=5,
    )
)
def test_mapping_never_maps_a_stage_and_maps_every_image(froms: list[tuple[str, bool]]) -> None:
    lines = []
    for i, (image, named) in enumerate(froms):
        lines.append(f"FROM {image}" + (f" AS s{i}" if named else ""))
        lines.append(f"RUN echo {i}")
        if i and froms[i - 1][1]:
            lines.append(f"FROM s{i - 1}")  # a stage built on the previous one
    text = "\n".join(lines) + "\n"
    mapped, replaced = map_base(text, "base:9")
    assert len(replaced) == len(froms)
    assert base_images(mapped) == ["base:9"]
    assert [ln for ln in mapped.splitlines() if ln.startswith("FROM s")] == [
        ln for ln in lines if ln.startswith("FROM s")
    ]


def test_a_reference_solution_that_fails_is_blamed_on_what_it_printed() -> None:
    cause, why = why_reference_fails(
        [
            "Cloning into 'x'...\nfatal: unable to access 'https://github.com/a/b/': Could not "
            "resolve host: github.com"
        ],
        [],
    )
    assert cause == "network" and "Could not resolve host: github.com" in why
    for line in (
        "E: Unable to locate package stockfish",
        "ERROR: No matching distribution found for eigenpy==3.10.3",
        "E: Method http has died unexpectedly!",
    ):
        cause, why = why_reference_fails([f"Reading package lists...\n{line}\nDone"], [])
        assert cause == "network" and line in why, line
    assert why_reference_fails(["bash: line 3: stockfish: command not found"], [])[0] == "command"
    assert why_reference_fails(["ModuleNotFoundError: No module named 'torch'"], [])[0] == "package"
    torch = "mte-offline: not installed in the offline image: torch==2.7.0"
    assert why_reference_fails(["ok"], [], [f"mte-offline: x\n{torch}\n"]) == (
        "package",
        f"the tests need what the image lacks: {torch}",
    )
    # what the tests print counts too (a module the solution did not manage to install)
    assert why_reference_fails(["done"], [], ["E   No module named 'eigenpy'"]) == (
        "package",
        "the Python module eigenpy is imported and the image lacks it",
    )
    lacking = ["offline, the image lacks: apt package not installed: gnucobol3"]
    assert why_reference_fails(["ok"], lacking) == ("package", lacking[0])
    assert why_reference_fails(["all done"], []) == ("tests", "")


def test_light_plans_and_the_reason_a_dockerfile_needs_docker_build(tmp_path: Path) -> None:
    (tmp_path / "app").mkdir()
    (tmp_path / "setup.sh").write_text("true\n")
    light = light_plan(
        tmp_path, "FROM base:1\nCOPY app/ /app/\nUSER 1\nWORKDIR /app\nRUN bash /setup.sh\n"
    )
    assert light.light and light.base == "base:1"
    for text, why in [
        ("FROM a\nFROM b\n", "stage"),
        ("FROM a\nVOLUME /x\n", "VOLUME"),
        ("FROM a\nADD https://x/y /y\n", "URL"),
        ("FROM a\nADD data.tar.gz /y\n", "archive"),
        ("FROM a\nCOPY missing /y\n", "not in the build context"),
        ("FROM a\nCOPY ../x /y\n", "leaves"),
        ("FROM a\nRUN <<EOF\nx\nEOF\n", "heredoc"),
    ]:
        plan = light_plan(tmp_path, text)
        assert not plan.light and why in plan.why_not_light, (text, plan.why_not_light)


@given(
    st.dictionaries(
        st.from_regex(r"[A-Za-z0-9_.' -]{1,12}(/[A-Za-z0-9_.-]{1,8})?", fullmatch=True).filter(
            lambda p: not any(part in (".", "..") for part in p.split("/"))
        ),
        st.binary(max_size=3000),
        min_size=1,
        max_size=4,
    ),
    st.integers(min_value=120, max_value=4000),
)
def test_solution_files_are_put_where_harbor_puts_them(
    files: dict[str, bytes], max_chars: int
) -> None:
    """The turns that stand for Harbor's upload of ``solution/`` write every file byte for
    byte (any name a folder may hold, any content, any size), each turn at most the longest
    command the env runs, run by bash one after another as the agent's shell runs them."""
    import subprocess
    import tempfile

    turns = solution_upload(files, max_chars=max_chars)
    assert turns[0].startswith("mkdir -p /solution")
    assert all(len(turn) <= max_chars for turn in turns), [len(t) for t in turns]
    with tempfile.TemporaryDirectory() as tmp:
        for turn in turns:
            script = turn.replace("/solution", f"{tmp}/solution")
            subprocess.run(["bash", "-c", script], check=True, capture_output=True)
        for name, data in files.items():
            assert Path(tmp, "solution", name).read_bytes() == data


def test_a_script_longer_than_a_command_is_uploaded_and_run_from_the_solution_folder() -> None:
    short, uploads, notes = script_solution("solve.sh", "#!/bin/bash\necho hi\n", {})
    assert (short, uploads, notes) == (("echo hi",), {}, [])
    script = "#!/bin/bash\ncat <<'E'\n" + "y" * 25_000 + "\nE\n"
    turns, uploads, notes = script_solution("solve.sh", script, {"a.txt": b"a"})
    assert uploads == {"a.txt": b"a", "solve.sh": script.encode()}
    assert turns[-1] == "bash /solution/solve.sh" and len(notes) == 1
    assert all(len(turn) <= 20_000 for turn in turns)


def test_solution_scripts_become_turns() -> None:
    script = "#!/bin/bash\n# a comment\n\ncd x\n# --- next turn ---\ncat <<'E'\na\nE\n\n"
    assert solution_turns(script) == ("cd x", "cat <<'E'\na\nE")
    assert solution_turns("#!/bin/bash\necho one\necho two\n") == ("echo one\necho two",)
    assert solution_turns("# only comments\n") == ()


def test_a_failed_build_is_blamed_on_its_cause() -> None:
    def log(step: str, *lines: str) -> str:
        return "\n".join(["Step 1/3 : FROM base", " ---> abc123abc123", step, *lines])

    cases = [
        (
            log("Step 2/3 : RUN git clone https://x/y", "fatal: Could not resolve host: x"),
            "network",
        ),
        (log("Step 2/3 : RUN pip install q", "Failed to establish a new connection"), "network"),
        (log("Step 2/3 : RUN mandb", "/bin/sh: 1: mandb: not found"), "command"),
        (log("Step 2/3 : COPY a /a", "COPY failed: file not found in build context"), "file"),
        (log("Step 2/3 : RUN false", "The command '/bin/sh -c false' returned 1"), "step"),
        (log("Step 2/3 : RUN x", "mte-offline: not installed in the offline image: q"), "package"),
        # a quiet download (wget -q) says nothing: the step's own URL tells
        (log("Step 2/3 : RUN cd /b && wget -q https://x/y.tgz && tar xzf y.tgz", "x"), "network"),
        # a package the apt-get stand-in skipped, then a network error: the network
        (
            log(
                "Step 2/3 : RUN apt-get install -y gcc && git clone https://x/y",
                "mte-offline: apt-get install: not in the offline image, skipped: gcc",
                "fatal: unable to access 'https://x/y/': Could not resolve host: x",
            ),
            "network",
        ),
        (
            log(
                "Step 2/3 : RUN apt-get install -y gcc && gcc a.c",
                "mte-offline: apt-get install: not in the offline image, skipped: gcc",
                "The command '/bin/sh -c apt-get install -y gcc && gcc a.c' returned 127",
            ),
            "package",
        ),
    ]
    for text, cause in cases:
        assert explain_build_failure(text, [])[0] == cause, text
    pulled = "Step 1/2 : FROM ghcr.io/x/y:1\npull access denied for ghcr.io/x/y"
    assert explain_build_failure(pulled, ["ghcr.io/x/y:1"])[0] == "base"


def _raw_tar(entries: dict[str, bytes | None], mtime: int = 5) -> bytes:
    """A tar as the engine or GNU tar writes one (members ``top/...``; ``None``: a directory)."""
    import io
    import tarfile

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in sorted(entries):
            info = tarfile.TarInfo(name)
            info.mtime = mtime
            data = entries[name]
            if data is None:
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
            else:
                info.size, info.mode = len(data), 0o644
                tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def test_a_state_has_one_content_digest_however_it_was_read() -> None:
    import io

    from multiturn_envs.sandbox.trees import content_digest, retop, split_tops

    app = {"app": None, "app/a.txt": b"one", "app/sub": None, "app/sub/b": b"two"}
    etc = {"etc": None, "etc/hosts": b"127.0.0.1 x", "etc/conf": b"k=v"}
    per_part = [
        ("/app", io.BytesIO(_raw_tar(app)), False),
        ("/etc", io.BytesIO(_raw_tar(etc)), False),
    ]
    combined = [("/", io.BytesIO(_raw_tar({**app, **etc}, mtime=9)), False)]
    rerooted = []
    for path, raw in (("/app", _raw_tar(app)), ("/etc", _raw_tar(etc))):
        out = io.BytesIO()
        retop(io.BytesIO(raw), out, path)
        rerooted.append((path, io.BytesIO(out.getvalue()), True))
    split = split_tops(io.BytesIO(_raw_tar({**app, **etc})))
    assert set(split) == {"/app", "/etc"}
    from_split = [(p, io.BytesIO(split[p]), True) for p in sorted(split)]
    digests = {content_digest(x) for x in (per_part, combined, rerooted, from_split)}
    assert len(digests) == 1  # times, member order and the engine's /etc/hosts do not count
    changed = [("/", io.BytesIO(_raw_tar({**app, "app/a.txt": b"ONE", **etc})), False)]
    assert content_digest(changed) not in digests


def test_bound_a_deep_reward_json_is_no_reward_not_a_recursion_error() -> None:
    """reward.json is written in the agent's container (issue 29): measured before parsing."""
    reward = parse_reward("[" * 100_000 + "]" * 100_000, None)
    assert reward.value is None and "nested" in (reward.problem or "")
