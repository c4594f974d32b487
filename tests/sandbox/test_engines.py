"""Engine addresses, the provider protocol's capability contract, and placement by load.

Addresses are outside input (an env option, ``--engine``, ``$MTE_ENGINES``): any text is either
an address or one ``ValueError`` naming what is wrong, never another exception, and an address
written back (``str``) reads as the same address. The capability contract refuses a provider
that lacks hardening an env needs, naming each missing capability, before any code runs.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from multiturn_envs.sandbox.docker_engine import DOCKER_CAPABILITIES, DockerEngine
from multiturn_envs.sandbox.engines import EngineAddress, engines_from_environment, parse_engines
from multiturn_envs.sandbox.provider import (
    UNTRUSTED_CODE,
    Capability,
    MissingCapability,
    require,
)


@given(st.text(max_size=200))
@settings(max_examples=300, deadline=None)
def test_any_text_is_an_address_or_one_value_error(text: str) -> None:
    try:
        address = EngineAddress.parse(text)
    except ValueError as exc:
        assert str(exc)
        return
    assert EngineAddress.parse(str(address)) == address


hosts = st.one_of(
    st.from_regex(r"[a-z][a-z0-9-]{0,20}(\.[a-z0-9-]{1,10}){0,2}", fullmatch=True),
    st.ip_addresses(v=4).map(str),
)


@given(
    host=hosts,
    port=st.integers(1, 65535),
    capacity=st.none() | st.integers(1, 10_000),
    rate=st.none() | st.floats(0.01, 1000, allow_nan=False),
    name=st.none() | st.from_regex(r"[A-Za-z0-9_.-]{1,20}", fullmatch=True),
)
@settings(max_examples=200, deadline=None)
def test_a_tcp_address_written_back_reads_the_same(
    host: str, port: int, capacity: int | None, rate: float | None, name: str | None
) -> None:
    query = [f"capacity={capacity}"] if capacity else []
    query += [f"rate={rate!r}"] if rate else []
    query += [f"name={name}"] if name else []
    text = f"tcp://{host}:{port}" + ("?" + "&".join(query) if query else "")
    address = EngineAddress.parse(text)
    assert address.url == f"tcp://{host}:{port}"
    assert address.capacity == capacity
    assert address.label == (name or address.url)
    assert EngineAddress.parse(str(address)) == address


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("tcp://host:0", "out of range"),
        ("tcp://host:2376?capacity=0", "capacity"),
        ("tcp://host:2376?rate=nan", "rate"),
        ("tcp://host:2376?tls=/nonexistent-mte-dir", "tls"),
        ("tcp://host:2376?colour=blue", "colour"),
        ("ssh://bad user@host", "user"),
        ("ssh://root@host?identity=/nonexistent-mte-key", "identity"),
        ("ssh://root@host?ssh_option=ProxyCommand=sh -c x", "ssh option"),
        ("http://host", "host"),
    ],
)
def test_a_bad_address_is_refused_with_its_reason(text: str, why: str) -> None:
    with pytest.raises(ValueError, match="engine address") as info:
        EngineAddress.parse(text)
    assert why in str(info.value)


def test_an_engine_listed_twice_is_refused() -> None:
    with pytest.raises(ValueError, match="listed twice"):
        parse_engines(["tcp://a:2375", "tcp://a:2375?name=other"])
    with pytest.raises(ValueError, match="same name"):
        parse_engines(["tcp://a:2375?name=x", "tcp://b:2375?name=x"])
    assert [a.url for a in parse_engines("local, tcp://a:2375\ntcp://b:2375")] == [
        "local",
        "tcp://a:2375",
        "tcp://b:2375",
    ]


def test_the_environment_variable_names_the_default_engines(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MTE_ENGINES", "")  # restored (unset) after the test
    monkeypatch.delenv("MTE_ENGINES")
    assert engines_from_environment() == (EngineAddress(),)
    monkeypatch.setenv("MTE_ENGINES", "tcp://a:2375 tcp://b:2375?capacity=4")
    assert [a.capacity for a in parse_engines(None)] == [None, 4]
    monkeypatch.setenv("MTE_ENGINES", "tcp://a:99999")
    with pytest.raises(ValueError, match=r"\$MTE_ENGINES"):
        engines_from_environment()


class _NoOomEvents(DockerEngine):
    """A real engine declaring less: what a provider without OOM reporting (e.g. a hosted one
    whose boxes are killed silently) would declare."""

    capabilities = DOCKER_CAPABILITIES - {Capability.OOM_EVENTS, Capability.NO_NETWORK}


def test_a_provider_lacking_hardening_is_refused_naming_what_is_missing() -> None:
    weak = _NoOomEvents("tcp://127.0.0.1:9?name=weak")  # never connected: refused first
    with pytest.raises(MissingCapability) as info:
        require(weak, UNTRUSTED_CODE, "untrusted code in MT/DeepCoder-v0")
    message = str(info.value)
    assert "'weak'" in message and "MT/DeepCoder-v0" in message
    assert "no-network" in message and "oom-events" in message
    assert "read-only-root" not in message
    assert set(info.value.missing) == {Capability.OOM_EVENTS, Capability.NO_NETWORK}
    require(DockerEngine("tcp://127.0.0.1:9"), UNTRUSTED_CODE, "anything")  # nothing missing


def test_the_code_sandbox_refuses_a_weak_provider_before_running_anything() -> None:
    from multiturn_envs.sandbox.base import TestCase
    from multiturn_envs.sandbox.docker_pool import DockerSandbox

    sandbox = DockerSandbox(size=1, provider=_NoOomEvents("tcp://127.0.0.1:9?name=weak"))
    try:
        with pytest.raises(MissingCapability, match="oom-events"):
            sandbox.run("print(1)", [TestCase("stdio", "", "1")])
    finally:
        sandbox.close()


def test_the_terminal_env_refuses_a_weak_engine_set() -> None:
    from multiturn_envs.envs.terminal.env import NEEDS

    assert UNTRUSTED_CODE <= NEEDS
    weak = _NoOomEvents("tcp://127.0.0.1:9?name=weak")
    with pytest.raises(MissingCapability, match="no-network"):
        require(weak, NEEDS, "untrusted commands in MT/Terminal-v0")


@pytest.mark.parametrize("command", ["eval", "serve"])
def test_the_cli_refuses_a_bad_engine_before_any_work(
    command: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from multiturn_envs.cli.app import main

    monkeypatch.setenv("MTE_ENGINES", "")  # restored (unset) after the test
    monkeypatch.delenv("MTE_ENGINES")
    argv = [command, "MT/DeepCoder-v0", "--engine", "tcp://a:2375", "--engine", "tcp://a:2375"]
    if command == "eval":
        argv += ["--policy", "expert", "--out", "/nonexistent-mte-dir/x.jsonl"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "--engine" in err and "listed twice" in err
    assert "MTE_ENGINES" not in os.environ


def test_the_cli_engines_become_the_process_default(monkeypatch: pytest.MonkeyPatch) -> None:
    from multiturn_envs.cli.common import use_engines

    monkeypatch.setenv("MTE_ENGINES", "")  # restored (unset) after the test
    monkeypatch.delenv("MTE_ENGINES")
    assert use_engines([]) == {}
    assert "MTE_ENGINES" not in os.environ
    set_ = use_engines(["local", "tcp://b:2375?capacity=3"])
    assert os.environ["MTE_ENGINES"] == set_["MTE_ENGINES"]
    assert [a.capacity for a in parse_engines(None)] == [None, 3]


def test_both_envs_refuse_a_bad_engine_when_made_and_keep_a_good_list() -> None:
    import gymnasium as gym

    import multiturn_envs  # noqa: F401

    for env_id in ("MT/DeepCoder-v0", "MT/Terminal-v0"):
        with pytest.raises(ValueError, match="engine address"):
            gym.make(env_id, engines=["tcp://a:2375", "tcp://b:99999"])
        env = gym.make(env_id, engines="tcp://a:2375?name=a, tcp://b:2375?capacity=3")
        try:
            assert [EngineAddress.parse(a).label for a in env.unwrapped.engines] == [
                "a",
                "tcp://b:2375",
            ]
        finally:
            env.close()


def test_an_ssh_engine_reaches_ssh_as_a_destination_and_a_port() -> None:
    """ssh reads neither ``HOST:PORT`` nor a bracketed IPv6 host as a destination."""
    from multiturn_envs.sandbox.ssh_tunnel import ssh_destination

    for raw, expected in (
        ("ssh://u@[::1]:2222", ("u@::1", "2222")),
        ("ssh://root@10.1.2.3", ("root@10.1.2.3", "")),
        ("ssh://host.example:2200", ("host.example", "2200")),
    ):
        (address,) = parse_engines([raw])
        assert ssh_destination(address.url) == expected, raw
    with pytest.raises(ValueError, match="not an ssh:// engine URL"):
        ssh_destination("tcp://host:2376")


def test_an_engine_slow_to_answer_does_not_stall_its_bookkeeping() -> None:
    """A listener that accepts and never answers: connecting takes the client's whole timeout,
    while the engine's box count (what placement by load reads of every engine) and a removal
    answer at once."""
    import socket
    import threading
    import time

    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        address = f"tcp://127.0.0.1:{server.getsockname()[1]}"
        engine = DockerEngine(EngineAddress.parse(address), timeout_s=6)
        failures: list[BaseException] = []

        def connect() -> None:
            try:
                engine.client  # noqa: B018 (connects)
            except RuntimeError as exc:
                failures.append(exc)

        thread = threading.Thread(target=connect)
        started = time.monotonic()
        thread.start()
        while not engine._connect_lock.locked() and time.monotonic() - started < 5:
            time.sleep(0.01)
        asked = time.monotonic()
        assert engine.live_boxes() == 0 and engine.box_ids() == []
        engine.remove("not-ours")
        answered = time.monotonic() - asked
        assert thread.is_alive()  # still connecting: what was asked did not wait for it
        thread.join(30)
        assert answered < 3.0 < time.monotonic() - started, answered
        assert failures and "does not answer" in str(failures[0])
        assert engine.gone  # placement leaves it out for a while
