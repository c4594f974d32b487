"""What LLMs write, turned into one command and/or the done signal (no Docker needed)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from multiturn_envs.envs.terminal.oracle import (
    error_command,
    expert_command,
    mutations,
    reference_position,
    whole_solution,
)
from multiturn_envs.envs.terminal.parsing import MAX_COMMAND_CHARS, parse_action


def test_raw_command_fenced_block_and_submit() -> None:
    assert parse_action("ls -la").command == "ls -la"
    parsed = parse_action("Let me look.\n```bash\ncd /app\nls\n```\nThen we'll see.")
    assert (parsed.command, parsed.submit) == ("cd /app\nls", False)
    parsed = parse_action("```sh\necho 1\n```\n```bash\necho 2\n```")
    assert parsed.command == "echo 2"  # the last block
    for done in ("submit", "`submit`", " SUBMIT. ", "**submit**"):
        assert parse_action(done) == parse_action("submit")
        assert parse_action(done).submit and parse_action(done).command is None
    parsed = parse_action("```bash\nmake\n```\nsubmit")
    assert (parsed.command, parsed.submit) == ("make", True)
    parsed = parse_action("echo hi\nsubmit")
    assert (parsed.command, parsed.submit) == ("echo hi", True)


def test_prompts_think_blocks_and_errors() -> None:
    assert parse_action("$ ls\n$ pwd").command == "ls\npwd"
    assert parse_action("```console\n$ cat a.txt\nhello\n```").command == "cat a.txt"
    assert parse_action("<think>maybe rm -rf?</think>echo ok").command == "echo ok"
    for empty in ("", "  \n", "```\n```", "<think>only thinking</think>"):
        parsed = parse_action(empty)
        assert parsed.command is None and not parsed.submit and parsed.error
    assert parse_action("x" * (MAX_COMMAND_CHARS + 1)).error
    assert parse_action("a heredoc <<'EOF'\nsubmit\nEOF").command is not None


@given(st.text(max_size=300))
def test_parsing_never_raises_and_is_exactly_one_outcome(text: str) -> None:
    parsed = parse_action(text)
    assert (parsed.error is not None) != (parsed.command is not None or parsed.submit)
    if parsed.command is not None:
        assert parsed.command.strip() and len(parsed.command) <= MAX_COMMAND_CHARS


SOLUTION = ["cd data", "sort -u words.txt > out.txt", "cd /app"]


def test_expert_follows_the_reference_path_then_the_whole_solution() -> None:
    assert reference_position([], SOLUTION) == 0
    assert expert_command([], SOLUTION, solved=False) == "cd data"
    assert expert_command(["cd  data"], SOLUTION, solved=False) == SOLUTION[1]
    assert reference_position(["ls"], SOLUTION) is None
    assert expert_command(["ls"], SOLUTION, solved=False) == whole_solution(SOLUTION)
    assert whole_solution(SOLUTION).startswith("cd /app\n")
    assert expert_command(["ls"], SOLUTION, solved=True) == "submit"


@given(st.text(max_size=80), st.integers(0, 2**32 - 1))
def test_error_commands_differ_from_the_expert_and_never_submit(cmd: str, seed: int) -> None:
    import numpy as np

    for variant in mutations(cmd):
        assert variant != cmd and variant.strip() != "submit"
    wrong = error_command(cmd or "ls", SOLUTION, np.random.default_rng(seed))
    assert wrong != (cmd or "ls") and not parse_action(wrong).submit


def test_mutations_are_plausible_one_edit_typos() -> None:
    variants = mutations("head -n 10 data.csv > top.csv")
    assert "head -n 11 data.csv > top.csv" in variants
    assert any(
        "dat.acsv" in v or "daat.csv" in v or "dtaa.csv" in v or "daa" in v for v in variants
    )
    assert "head 10 data.csv > top.csv" in variants
