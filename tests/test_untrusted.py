"""The one home for untrusted input (``multiturn_envs.untrusted``): every bound it promises,
each test named after the bound it checks, hypothesis for generated degenerate inputs."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from multiturn_envs.errors import UntrustedInputError
from multiturn_envs.safejson import JSONLimitError
from multiturn_envs.untrusted import (
    MAX_LINKS,
    Fields,
    Folder,
    load_json,
    load_toml,
    load_yaml,
    open_regular,
    parse_json,
    parse_toml,
    parse_yaml,
    read_bytes,
    read_text,
    value_depth,
)


@pytest.fixture
def task(tmp_path: Path) -> Path:
    root = tmp_path / "task"
    (root / "tests" / "sub").mkdir(parents=True)
    (root / "instruction.md").write_text("do it\n")
    (root / "tests" / "test.sh").write_text("exit 0\n")
    (root / "tests" / "sub" / "data.txt").write_text("data\n")
    (tmp_path / "secret").write_text("host secret\n")
    return root


def _refused(call: object, *args: object, match: str = "", **kwargs: object) -> str:
    with pytest.raises(UntrustedInputError, match=match or None) as info:
        call(*args, **kwargs)  # type: ignore[operator]
    return str(info.value)


# ------------------------------------------------------------------ paths stay in the folder
def test_bound_paths_stay_inside_links_out_are_refused(task: Path, tmp_path: Path) -> None:
    (task / "tests" / "passwd").symlink_to("/etc/passwd")
    (task / "tests" / "rel").symlink_to("../../secret")
    (task / "etc").symlink_to("/etc")
    folder = Folder(task)
    message = _refused(folder.read_bytes, "tests/passwd", match="outside the folder")
    assert "tests/passwd" in message and "/etc/passwd" in message
    _refused(folder.read_bytes, "tests/rel", match="leaves the folder")
    _refused(folder.read_bytes, "etc/passwd", match="outside the folder")
    _refused(folder.read_bytes, "../secret", match="leaves the folder")
    _refused(folder.read_bytes, "/etc/passwd", match="absolute path")
    _refused(folder.read_bytes, "tests/../../secret", match="leaves the folder")
    # a refusal is never a quiet "missing": a task must not lose a file to a link
    _refused(folder.is_file, "tests/passwd")
    _refused(folder.exists, "tests/rel")


def test_bound_links_inside_the_folder_are_followed(task: Path) -> None:
    (task / "tests" / "same").symlink_to("../instruction.md")
    (task / "tests" / "sub" / "up").symlink_to("..")
    (task / "alias").symlink_to("tests/sub")
    folder = Folder(task)
    assert folder.read_text("tests/same") == "do it\n"
    assert folder.read_text("tests/sub/up/test.sh") == "exit 0\n"
    assert folder.read_text("alias/data.txt") == "data\n"
    assert folder.is_dir("alias") and folder.is_file("tests/same")
    assert folder.sub("alias").read_text("data.txt") == "data\n"


def test_bound_link_loops_stop_at_the_link_limit(task: Path) -> None:
    (task / "a").symlink_to("b")
    (task / "b").symlink_to("a")
    _refused(Folder(task).read_bytes, "a", match=f"more than {MAX_LINKS} links")


def test_bound_a_swap_after_the_check_cannot_escape(task: Path, tmp_path: Path) -> None:
    """A component swapped for a link to the host between checks (a racing attacker): the
    path is never re-resolved as a string, so no read ever returns the host's file."""
    stop = threading.Event()
    sub = task / "tests" / "sub"
    elsewhere = tmp_path / "outside"
    elsewhere.mkdir()
    (elsewhere / "data.txt").write_text("host secret\n")

    def swap() -> None:
        while not stop.is_set():
            try:
                sub.rename(task / "tests" / "held")
                sub.symlink_to(elsewhere)
                sub.unlink()
                (task / "tests" / "held").rename(sub)
            except OSError:
                pass

    thread = threading.Thread(target=swap)
    thread.start()
    folder = Folder(task)
    seen = set()
    try:
        for _ in range(2000):
            try:
                seen.add(folder.read_text("tests/sub/data.txt"))
            except UntrustedInputError:
                seen.add("refused")
    finally:
        stop.set()
        thread.join()
    assert "host secret\n" not in seen


@settings(max_examples=60, deadline=None)
@given(
    links=st.lists(
        st.tuples(
            st.sampled_from(["l1", "tests/l2", "tests/sub/l3"]),
            st.sampled_from(
                [
                    "..",
                    "../..",
                    "../../..",
                    "/etc",
                    "../secret",
                    "../../secret",
                    "tests",
                    "sub",
                    "instruction.md",
                    "../instruction.md",
                    "data.txt",
                    ".",
                    "l1",
                ]
            ),
        ),
        max_size=3,
        unique_by=lambda pair: pair[0],
    ),
    path=st.lists(
        st.sampled_from(
            [
                "..",
                ".",
                "l1",
                "l2",
                "l3",
                "tests",
                "sub",
                "data.txt",
                "secret",
                "instruction.md",
                "test.sh",
            ]
        ),
        min_size=1,
        max_size=6,
    ),
)
def test_bound_no_path_reads_outside_the_folder(
    tmp_path_factory: pytest.TempPathFactory, links: list[tuple[str, str]], path: list[str]
) -> None:
    """Generated links and paths: whatever is read is a regular file whose real path lies
    inside the folder, with the content that file has; a path whose real target is outside
    is refused."""
    base = tmp_path_factory.mktemp("walk")
    root = base / "task"
    (root / "tests" / "sub").mkdir(parents=True)
    (root / "instruction.md").write_text("inside\n")
    (root / "tests" / "sub" / "data.txt").write_text("inside data\n")
    (base / "secret").write_text("outside\n")
    for where, target in links:
        (root / where).symlink_to(target)
    rel = "/".join(path)
    real = os.path.realpath(root / rel)
    inside = real == str(root) or real.startswith(f"{root}/")
    try:
        data = Folder(root).read_bytes(rel)
    except UntrustedInputError:
        return
    assert inside, f"{rel} read {real}, outside"
    assert data == Path(real).read_bytes()


# ------------------------------------------------------------------ regular files, byte caps
def test_bound_a_fifo_is_refused_without_blocking(task: Path) -> None:
    os.mkfifo(task / "tests" / "pipe")
    os.mkfifo(task / "config.json")
    start = time.monotonic()
    _refused(Folder(task).read_bytes, "tests/pipe", match="FIFO")
    _refused(read_bytes, task / "config.json", match="FIFO")
    _refused(open_regular, task / "config.json", match="FIFO")
    assert time.monotonic() - start < 5
    assert not Folder(task).is_file("tests/pipe")


def test_bound_special_files_pass_only_when_asked(task: Path) -> None:
    assert read_bytes("/dev/null", allow_special=True) == b""
    _refused(read_bytes, "/dev/null", match="device")
    _refused(read_bytes, task, match="directory")
    _refused(read_bytes, task / "missing", match="no such file")


def test_bound_a_sparse_2_gib_file_costs_nothing(task: Path) -> None:
    with open(task / "tests" / "big", "wb") as handle:
        handle.truncate(2 << 30)
    start = time.monotonic()
    message = _refused(Folder(task).read_bytes, "tests/big", match="over the limit")
    _refused(read_bytes, task / "tests" / "big", match="over the limit")
    _refused(Folder(task).read_tree, "tests", match="over the limit")
    assert time.monotonic() - start < 1.0
    assert "2,147,483,648 bytes" in message


def test_bound_the_byte_cap_is_exact(task: Path) -> None:
    (task / "f").write_bytes(b"x" * 100)
    assert Folder(task).read_bytes("f", max_bytes=100) == b"x" * 100
    _refused(Folder(task).read_bytes, "f", max_bytes=99, match="over the limit of 99")


def test_bound_a_file_growing_while_read_is_cut_at_the_cap() -> None:
    # /dev/zero reports size 0 and never ends: the cap stops the read, a refusal
    _refused(read_bytes, "/dev/zero", allow_special=True, max_bytes=1 << 20, match="grew")


def test_bound_text_decoding_is_strict_utf8(task: Path) -> None:
    (task / "bad.md").write_bytes(b"ok \xff\xfe")
    message = _refused(Folder(task).read_text, "bad.md", match="not utf-8 text")
    assert "byte 3" in message
    assert Folder(task).read_text("bad.md", encoding="latin-1") == "ok \xff\xfe"


def test_bound_read_tree_caps_each_file_and_the_total(task: Path) -> None:
    for i in range(5):
        (task / "tests" / f"f{i}").write_bytes(b"y" * 1000)
    folder = Folder(task)
    tree = folder.read_tree("tests")
    assert tree["sub/data.txt"] == b"data\n" and len(tree) == 7
    _refused(folder.read_tree, "tests", max_file_bytes=999, match="over the limit of 999")
    _refused(folder.read_tree, "tests", max_total_bytes=3000, match="over the limit")


# ------------------------------------------------------------------ listing
def test_bound_walk_counts_entries_and_levels(task: Path) -> None:
    many = task / "many"
    many.mkdir()
    for i in range(50):
        (many / str(i)).touch()
    folder = Folder(task)
    assert len(folder.walk("many")) == 50
    _refused(folder.walk, "many", max_entries=49, match="over 49 entries")
    deep = task / "deep"
    path = deep
    for _ in range(10):
        path = path / "d"
    path.mkdir(parents=True)
    assert len(folder.walk("deep")) == 10
    _refused(folder.walk, "deep", max_depth=5, match="over 5 levels")


def test_bound_walk_lists_links_never_follows_them(task: Path) -> None:
    (task / "tests" / "host").symlink_to("/etc")
    (task / "tests" / "loop").symlink_to(".")
    entries = {e.path: e.kind for e in Folder(task).walk("tests")}
    assert entries["host"] == "link" and entries["loop"] == "link"
    assert not any(p.startswith(("host/", "loop/")) for p in entries)
    _refused(Folder(task).check_links, "tests", match="outside the folder")
    _refused(Folder(task).read_tree, "tests", match="outside the folder")


# ------------------------------------------------------------------ parsers
@pytest.mark.parametrize("libyaml", [True, False])
def test_bound_yaml_alias_bomb_is_refused_fast(libyaml: bool) -> None:
    """The issue's 335-byte task.yaml with 8 levels of aliases (a 312-million-character
    field once expanded)."""
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(8):
        name, prev = chr(98 + i), chr(97 + i)
        lines.append(f"{name}: &{name} [{','.join([f'*{prev}'] * 9)}]")
    start = time.monotonic()
    _refused(parse_yaml, "\n".join(lines), libyaml=libyaml, match="expand to over")
    assert time.monotonic() - start < 1.0


@pytest.mark.parametrize("libyaml", [True, False])
def test_bound_yaml_aliases_within_bounds_load(libyaml: bool) -> None:
    text = "base: &b {image: x, user: root}\nclient: *b\nother:\n  <<: *b\n  user: me\n"
    assert parse_yaml(text, libyaml=libyaml) == {
        "base": {"image": "x", "user": "root"},
        "client": {"image": "x", "user": "root"},
        "other": {"image": "x", "user": "me"},
    }


def test_bound_yaml_alias_chains_cannot_exceed_the_depth() -> None:
    lines = ["a0: &a0 [1]"] + [f"a{i}: &a{i} [*a{i - 1}]" for i in range(1, 80)]
    _refused(parse_yaml, "\n".join(lines), match="nest it over 64 deep")
    _refused(parse_yaml, "&a [*a]", match="cycle")


@settings(max_examples=20, deadline=None)
@given(
    depth=st.integers(65, 20_000),
    style=st.sampled_from(["flow", "block", "map"]),
    libyaml=st.booleans(),
)
def test_bound_deep_yaml_is_refused_never_recursion_error(
    depth: int, style: str, libyaml: bool
) -> None:
    if style == "flow":
        text = "[" * depth + "]" * depth
    elif style == "block":
        text = "".join("  " * i + "-\n" for i in range(min(depth, 3000)))
    else:
        text = "{a: " * depth + "1" + "}" * depth
    _refused(parse_yaml, text, libyaml=libyaml, match="nested over the limit")


@settings(max_examples=20, deadline=None)
@given(depth=st.integers(65, 20_000), style=st.sampled_from(["array", "inline", "dotted"]))
def test_bound_deep_toml_is_refused_never_recursion_error(depth: int, style: str) -> None:
    if style == "array":
        text = "a = " + "[" * depth + "]" * depth
    elif style == "inline":
        text = "a = " + "{b = " * depth + "1" + "}" * depth
    else:
        text = "[" + ".".join(["k"] * depth) + "]\nv = 1\n"
    _refused(parse_toml, text, match="nested")


def test_bound_toml_brackets_in_strings_and_comments_do_not_count() -> None:
    text = "a = \"[[[[[[[[[[\" # {{{{{{{{{{{{\nb = '''\n[[[[[[[[[[\n'''\nc = [[1]]\n"
    assert parse_toml(text, max_depth=3)["c"] == [[1]]


@settings(max_examples=20, deadline=None)
@given(depth=st.integers(65, 50_000))
def test_bound_deep_json_is_refused_before_parsing(depth: int) -> None:
    message = _refused(parse_json, '{"a":' * depth + "1" + "}" * depth, match="nested")
    assert f"nested {depth} deep" in message


def test_bound_one_exception_type_for_every_refusal() -> None:
    assert issubclass(JSONLimitError, UntrustedInputError)
    assert issubclass(UntrustedInputError, ValueError)
    for call, text in [
        (parse_json, "{"),
        (parse_yaml, "a: [\n"),
        (parse_toml, "a = "),
        (parse_toml, "x = 1" + "0" * 5000),
        (parse_yaml, "x: !!python/object:os.system {}"),
    ]:
        _refused(call, text, where="the.file", match="the.file")


def test_files_the_user_named_are_read_within_bounds(tmp_path: Path) -> None:
    (tmp_path / "c.json").write_text(json.dumps({"a": [1, 2]}))
    (tmp_path / "c.yaml").write_text("a: [1, 2]\n")
    (tmp_path / "c.toml").write_text("a = [1, 2]\n")
    for load, suffix in ((load_json, "json"), (load_yaml, "yaml"), (load_toml, "toml")):
        assert load(tmp_path / f"c.{suffix}") == {"a": [1, 2]}
    assert read_text(tmp_path / "c.yaml") == "a: [1, 2]\n"
    _refused(load_json, tmp_path / "c.yaml", match="not valid JSON")
    _refused(load_yaml, tmp_path / "c.toml", max_bytes=3, match="over the limit of 3")


@settings(max_examples=50, deadline=None)
@given(
    st.recursive(
        st.integers() | st.text(max_size=3),
        lambda c: st.lists(c) | st.dictionaries(st.text(max_size=2), c),
        max_leaves=30,
    )
)
def test_value_depth_matches_a_recursive_count(value: object) -> None:
    def depth(v: object) -> int:
        if isinstance(v, dict):
            return 1 + max((depth(c) for c in v.values()), default=0)
        if isinstance(v, list):
            return 1 + max((depth(c) for c in v), default=0)
        return 0

    assert value_depth(value) == depth(value)


def test_value_depth_of_a_very_deep_value_is_no_recursion_error() -> None:
    value: list[object] = []
    for _ in range(100_000):
        value = [value]
    assert value_depth(value) == 100_001


# ------------------------------------------------------------------ typed fields
@pytest.mark.parametrize(
    "value", [-5, float("nan"), float("inf"), float("-inf"), 1e29, True, "60", [60], {"a": 1}]
)
def test_bound_numbers_are_finite_typed_and_in_range(value: object) -> None:
    fields = Fields({"verifier": {"timeout_sec": value}}, where="task.toml").table("verifier")
    message = _refused(
        fields.number,
        "timeout_sec",
        default=None,
        minimum=0,
        maximum=86_400,
        exclusive_minimum=True,
    )
    assert "task.toml: verifier.timeout_sec must be a number over 0" in message


def test_numbers_in_range_and_defaults() -> None:
    fields = Fields({"a": 60, "b": 1.5, "c": None}, where="f")
    assert fields.number("a", default=None, minimum=0, maximum=100) == 60.0
    assert fields.number("b", default=None, minimum=0, maximum=100) == 1.5
    assert fields.number("c", default=7.0, minimum=0, maximum=100) == 7.0
    assert fields.number("d", default=None, minimum=0, maximum=100) is None


@pytest.mark.parametrize("value", [float("inf"), 2.5, [1], "2048", True, 10**30, -1])
def test_bound_integers_are_whole_and_in_range(value: object) -> None:
    fields = Fields({"memory_mb": value}, where="task.toml", prefix="environment.")
    message = _refused(fields.integer, "memory_mb", default=None, minimum=1, maximum=1 << 20)
    assert "environment.memory_mb must be a whole number" in message
    assert (
        Fields({"m": 2048.0}, where="f").integer("m", default=None, minimum=1, maximum=4096) == 2048
    )


def test_bound_text_fields_are_strings_within_length() -> None:
    fields = Fields(
        {"user": 1000, "name": "x" * 200, "kind": "pytest", "list": ["a", 1]}, where="f"
    )
    assert fields.text("user", scalars=True) == "1000"
    _refused(fields.text, "user", match="must be a string")
    _refused(fields.text, "name", max_chars=100, match="200 characters long")
    _refused(fields.text, "kind", choices=("tap",), match="one of tap")
    _refused(fields.text_list, "list", match="strings")
    _refused(Fields, [1, 2], where="f", match="must be a table")
    _refused(Fields({"t": [1]}, where="f").table, "t", match="t must be a table")
    _refused(Fields({"b": "yes"}, where="f").flag, "b", match="true or false")
    env = Fields({"env": {"A": 1, "B": "x", "C": True}}, where="f").text_map("env")
    assert env == {"A": "1", "B": "x", "C": "true"}
    _refused(Fields({"env": {"A": [1]}}, where="f").text_map, "env", match="env.A must be")


def test_messages_show_values_bounded() -> None:
    fields = Fields({"a": "z" * 1_000_000, "b": list(range(1_000_000))}, where="f")
    for key in ("a", "b"):
        message = _refused(fields.number, key, default=None, minimum=0, maximum=1)
        assert len(message) < 300


def test_bound_a_sub_folder_replaced_by_a_link_is_refused(task: Path, tmp_path: Path) -> None:
    sub = Folder(task).sub("tests/sub")
    assert sub.read_text("data.txt") == "data\n"
    (task / "tests" / "sub").rename(task / "held")
    (task / "tests" / "sub").symlink_to("../held")  # still inside the task, but a swap
    _refused(sub.read_text, "data.txt", match="replaced by a link")


@pytest.mark.parametrize("libyaml", [True, False])
def test_yaml_with_and_without_libyaml_read_the_same(libyaml: bool) -> None:
    text = (
        "instruction: |\n  Do it.\n  Twice.\nn: 3\nf: 1.5\nb: yes\nd: 2024-01-02\n"
        "l: [a, 'b', \"c\"]\nm: {x: ~}\nenv:\n  - A=1\n"
    )
    import yaml

    assert parse_yaml(text, libyaml=libyaml) == yaml.safe_load(text)
