"""Where a Docker engine is and how to reach it: this machine's, one over TCP+TLS, one over SSH.

An engine is named by one line of text (the env option ``engines``, the CLI's ``--engine``, the
server's ``--engine``, ``$MTE_ENGINES``), parsed by :meth:`EngineAddress.parse`:

* ``local``: the engine ``docker`` itself would use (``DOCKER_HOST``, ``DOCKER_TLS_VERIFY``,
  ``DOCKER_CERT_PATH``, else the local socket);
* ``unix:///path/to/docker.sock``: an engine's socket on this machine;
* ``tcp://HOST:2376?tls=DIR``: an engine elsewhere, over TLS with the client certificate and
  the engine's CA from ``DIR`` (``ca.pem``, ``cert.pem``, ``key.pem``: Docker's own layout);
  ``tcp://HOST:2375`` without ``tls``: plain TCP, for a private link only (anyone who reaches
  that port owns the engine);
* ``ssh://USER@HOST[:PORT]?socket=/var/run/docker.sock&identity=KEY``: an engine reached
  through ``ssh``: a forwarded unix socket (:mod:`.ssh_tunnel`), so every call, the long-lived
  streams of the runner and the shell included, behaves as on a local socket.

Options any address takes: ``name=`` (how errors and labels name it), ``capacity=`` (containers
it may hold at once; default: its CPUs), ``rate=`` (container creations per second; default
:data:`DEFAULT_RATE`), ``registry=HOST:PORT`` (the registry on the local network this engine
pulls images from, :mod:`.image_transfer`; default: images are sent with save/load).

Why the CA needs care: the ``requests`` library under the Docker SDK lets
``REQUESTS_CA_BUNDLE``/``CURL_CA_BUNDLE`` replace the CA the SDK passes whenever they are set
(a per-request ``verify`` of ``None`` is overridden by them before the session's own CA is
consulted), so an engine with its own CA fails with ``CERTIFICATE_VERIFY_FAILED`` on every
machine that sets them. :func:`connect` turns ``trust_env`` off on the client's session: the
engine's CA, and no proxy or ``.netrc`` from the environment, is what a connection to an engine
uses (tested with both variables set).
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import urllib.parse
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "DEFAULT_RATE",
    "ENGINES_VARIABLE",
    "EngineAddress",
    "connect",
    "engines_from_environment",
    "parse_engines",
]

DEFAULT_RATE = 20.0
"""Container creations per second an engine is asked for at most, unless its address says
otherwise: about what one engine on two cores completes (a creation costs it ~50 ms of CPU);
past it, requests only queue inside the engine, where no one can see or cancel them."""
ENGINES_VARIABLE = "MTE_ENGINES"
"""Environment variable listing the engines to use by default (addresses separated by spaces,
commas or new lines); unset or empty: this machine's engine alone."""
TLS_FILES = ("ca.pem", "cert.pem", "key.pem")
MIN_API_VERSION = "1.24"
"""The API version a client starts with, before it asks the engine for the one it speaks."""
_NAME = re.compile(r"^[A-Za-z0-9_.:@/-]{1,64}$")


def _positive(value: str, what: str, text: str, integer: bool) -> float:
    try:
        number = int(value) if integer else float(value)
    except ValueError:
        number = math.nan
    if not (math.isfinite(number) and number > 0):
        kind = "a positive integer" if integer else "a positive number"
        raise ValueError(f"engine address {text!r}: {what} must be {kind}, not {value!r}")
    return number


@dataclass(frozen=True)
class EngineAddress:
    """One engine: how to reach it and what it may be asked for (see the module docstring).

    Attributes:
        url: ``local``, ``unix://PATH``, ``tcp://HOST:PORT`` or ``ssh://[USER@]HOST[:PORT]``.
        tls_dir: the folder of ``ca.pem``, ``cert.pem``, ``key.pem`` (TCP with TLS).
        ssh_socket: the engine's socket on the SSH host.
        ssh_identity: the private key ``ssh`` uses (default: the user's ssh configuration).
        ssh_options: further ``-o`` options for ``ssh`` (``StrictHostKeyChecking=...``).
        name: how messages and container labels name the engine.
        capacity: containers it may hold at once (``None``: its CPU count, asked at connect).
        rate: container creations per second (``None``: :data:`DEFAULT_RATE`).
        registry: ``HOST:PORT`` of the registry this engine pulls images from (``None``:
            images are sent with ``docker save``/``load``).
    """

    url: str = "local"
    tls_dir: str | None = None
    ssh_socket: str = "/var/run/docker.sock"
    ssh_identity: str | None = None
    ssh_options: tuple[str, ...] = ()
    name: str = ""
    capacity: int | None = None
    rate: float | None = None
    registry: str | None = None

    @property
    def scheme(self) -> str:
        return "local" if self.url == "local" else self.url.split("://", 1)[0]

    @property
    def label(self) -> str:
        """The engine's name in messages: ``name=`` or the URL without credentials."""
        if self.name:
            return self.name
        return self.url

    @property
    def endpoint(self) -> str:
        """Which engine this is, whatever the options say of it (``name=``, ``capacity=``,
        ``rate=``, how TLS or ssh are set up): two addresses with one endpoint are one engine,
        with one creation budget (:mod:`.creation_rate`)."""
        return self.url + (f"#{self.ssh_socket}" if self.scheme == "ssh" else "")

    @property
    def creation_rate(self) -> float:
        return DEFAULT_RATE if self.rate is None else self.rate

    @classmethod
    def parse(cls, text: str) -> EngineAddress:
        """The address in ``text`` (module docstring); ``ValueError`` naming what is wrong."""
        if not isinstance(text, str):
            raise ValueError(f"an engine address is text, not {type(text).__name__}")
        raw = text.strip()
        if not raw or len(raw) > 2048 or any(ord(c) < 32 for c in raw):
            raise ValueError(
                f"engine address {text[:80]!r}: expected local, unix://PATH, tcp://HOST:PORT "
                "or ssh://USER@HOST (at most 2048 characters, no control characters)"
            )
        base, _, query = raw.partition("?")
        try:
            pairs = urllib.parse.parse_qsl(
                query, keep_blank_values=True, strict_parsing=bool(query)
            )
        except ValueError:
            raise ValueError(f"engine address {raw!r}: cannot read its options {query!r}") from None
        options: dict[str, str] = {}
        for key, value in pairs:
            if key in options:
                raise ValueError(f"engine address {raw!r}: option {key!r} given twice")
            options[key] = value
        known = {"name", "capacity", "rate", "registry", "tls", "socket", "identity", "ssh_option"}
        unknown = sorted(set(options) - known)
        if unknown:
            raise ValueError(
                f"engine address {raw!r}: unknown option(s) {', '.join(unknown)} "
                f"(known: {', '.join(sorted(known))})"
            )
        name = options.get("name", "")
        if name and not _NAME.match(name):
            raise ValueError(f"engine address {raw!r}: name must be 1-64 letters, digits or _.:@/-")
        capacity = (
            int(_positive(options["capacity"], "capacity", raw, True))
            if "capacity" in options
            else None
        )
        rate = _positive(options["rate"], "rate", raw, False) if "rate" in options else None
        registry = options.get("registry")
        if registry is not None and not re.match(r"^[A-Za-z0-9_.-]+:\d{1,5}$", registry):
            raise ValueError(f"engine address {raw!r}: registry= is HOST:PORT, not {registry!r}")
        common = {"name": name, "capacity": capacity, "rate": rate, "registry": registry}
        if base == "local":
            cls._only(raw, options, set())
            return cls("local", **common)  # type: ignore[arg-type]
        scheme, sep, rest = base.partition("://")
        if not sep or scheme not in ("unix", "tcp", "ssh"):
            raise ValueError(
                f"engine address {raw!r}: expected local, unix://PATH, tcp://HOST:PORT or "
                "ssh://USER@HOST"
            )
        if scheme == "unix":
            cls._only(raw, options, set())
            if not rest.startswith("/"):
                raise ValueError(f"engine address {raw!r}: a unix socket's path is absolute")
            return cls(base, **common)  # type: ignore[arg-type]
        host, port = cls._host_port(raw, rest, scheme)
        if scheme == "tcp":
            cls._only(raw, options, {"tls"})
            tls = options.get("tls")
            if tls is not None:
                missing = [f for f in TLS_FILES if not (Path(tls).expanduser() / f).is_file()]
                if missing:
                    raise ValueError(
                        f"engine address {raw!r}: the TLS folder {tls} lacks "
                        f"{', '.join(missing)} (Docker's layout: ca.pem, cert.pem, key.pem)"
                    )
                tls = str(Path(tls).expanduser())
            return cls(f"tcp://{host}:{port or (2376 if tls else 2375)}", tls_dir=tls, **common)  # type: ignore[arg-type]
        cls._only(raw, options, {"socket", "identity", "ssh_option"})
        socket_path = options.get("socket", "/var/run/docker.sock")
        if not socket_path.startswith("/"):
            raise ValueError(f"engine address {raw!r}: socket= is an absolute path")
        identity = options.get("identity")
        if identity is not None and not Path(identity).expanduser().is_file():
            raise ValueError(f"engine address {raw!r}: no identity file at {identity}")
        ssh_options = tuple(o for o in options.get("ssh_option", "").split(",") if o)
        for option in ssh_options:
            if not re.match(r"^[A-Za-z]+=[A-Za-z0-9_./:@=-]*$", option):
                raise ValueError(f"engine address {raw!r}: ssh option {option!r} is not KEY=VALUE")
        user, at, _hostpart = rest.partition("@")
        where = f"{user}@{host}" if at else host
        url = f"ssh://{where}" + (f":{port}" if port else "")
        return cls(
            url,
            ssh_socket=socket_path,
            ssh_identity=str(Path(identity).expanduser()) if identity else None,
            ssh_options=ssh_options,
            **common,  # type: ignore[arg-type]
        )

    @staticmethod
    def _only(raw: str, options: dict[str, str], allowed: set[str]) -> None:
        extra = sorted(set(options) - allowed - {"name", "capacity", "rate", "registry"})
        if extra:
            raise ValueError(f"engine address {raw!r}: option(s) {', '.join(extra)} do not apply")

    @staticmethod
    def _host_port(raw: str, rest: str, scheme: str) -> tuple[str, int | None]:
        hostport = rest.rsplit("@", 1)[-1].rstrip("/")
        if (
            scheme == "ssh"
            and "@" in rest
            and not re.match(r"^[A-Za-z0-9_.-]+$", rest.split("@")[0])
        ):
            raise ValueError(f"engine address {raw!r}: the user name is not a plain name")
        match = re.match(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+)(?::(\d{1,5}))?$", hostport)
        if not match:
            raise ValueError(f"engine address {raw!r}: expected HOST or HOST:PORT")
        port = int(match.group(2)) if match.group(2) else None
        if port is not None and not 0 < port < 65536:
            raise ValueError(f"engine address {raw!r}: port {port} is out of range")
        return match.group(1), port

    def __str__(self) -> str:
        query = {}
        if self.tls_dir:
            query["tls"] = self.tls_dir
        if self.scheme == "ssh":
            if self.ssh_socket != "/var/run/docker.sock":
                query["socket"] = self.ssh_socket
            if self.ssh_identity:
                query["identity"] = self.ssh_identity
            if self.ssh_options:
                query["ssh_option"] = ",".join(self.ssh_options)
        if self.name:
            query["name"] = self.name
        if self.capacity is not None:
            query["capacity"] = str(self.capacity)
        if self.rate is not None:
            query["rate"] = repr(self.rate)
        if self.registry is not None:
            query["registry"] = self.registry
        return self.url + ("?" + urllib.parse.urlencode(query, safe="/:,=@") if query else "")


def parse_engines(items: Iterable[str | EngineAddress] | str | None) -> tuple[EngineAddress, ...]:
    """Engine addresses from a list (or one text of them separated by spaces, commas or new
    lines); ``None`` or empty: :func:`engines_from_environment`. Duplicates are refused: two
    entries for one engine would double what placement believes it may ask of it."""
    if items is None:
        return engines_from_environment()
    if isinstance(items, str):
        items = [part for part in re.split(r"[\s,]+", items) if part]
    out: list[EngineAddress] = []
    for item in items:
        address = item if isinstance(item, EngineAddress) else EngineAddress.parse(item)
        if any(o.endpoint == address.endpoint for o in out):
            raise ValueError(f"engine {address.label} is listed twice")
        out.append(address)
    if len({a.label for a in out}) != len(out):
        raise ValueError("two engines have the same name")
    return tuple(out) or (EngineAddress(),)


def engines_from_environment() -> tuple[EngineAddress, ...]:
    """``$MTE_ENGINES`` parsed, else this machine's engine alone."""
    text = os.environ.get(ENGINES_VARIABLE, "").strip()
    if not text:
        return (EngineAddress(),)
    try:
        return parse_engines(text)
    except ValueError as exc:
        raise ValueError(f"${ENGINES_VARIABLE}: {exc}") from None


def connect(
    address: EngineAddress, timeout_s: float = 120.0, max_pool_size: int = 16
) -> tuple[Any, Callable[[], None]]:
    """A ``docker.DockerClient`` for the engine, and what closes it (the client and, for SSH,
    the tunnel). Its session never lets the environment choose a CA, a proxy or credentials
    (module docstring). Raises ``RuntimeError`` naming the engine when it does not answer."""
    import docker

    tunnel: Any = None
    # a fixed version first: the SDK's constructor asks the engine for its version at once,
    # before trust_env can be turned off (the very request the environment's CA would fail)
    kwargs: dict[str, Any] = {
        "timeout": int(timeout_s),
        "max_pool_size": max_pool_size,
        "version": MIN_API_VERSION,
    }
    try:
        if address.scheme == "local":
            client = docker.from_env(**kwargs)
        elif address.scheme == "unix":
            client = docker.DockerClient(base_url=address.url, **kwargs)
        elif address.scheme == "tcp":
            tls: Any = False
            if address.tls_dir:
                folder = Path(address.tls_dir)
                tls = docker.tls.TLSConfig(
                    client_cert=(str(folder / "cert.pem"), str(folder / "key.pem")),
                    ca_cert=str(folder / "ca.pem"),
                    verify=True,
                )
            client = docker.DockerClient(base_url=address.url, tls=tls, **kwargs)
        else:
            from multiturn_envs.sandbox.ssh_tunnel import SshTunnel

            tunnel = SshTunnel(address)
            client = docker.DockerClient(base_url=f"unix://{tunnel.local_socket}", **kwargs)
        client.api.trust_env = False  # the engine's CA, never $REQUESTS_CA_BUNDLE's
        client.api._version = client.api._retrieve_server_version()
        client.ping()
    except Exception as exc:
        if tunnel is not None:
            tunnel.close()
        raise RuntimeError(
            f"the Docker engine {address.label} does not answer: {type(exc).__name__}: "
            f"{str(exc)[:300]}"
        ) from exc

    def close() -> None:
        with contextlib.suppress(Exception):
            client.close()
        if tunnel is not None:
            tunnel.close()

    return client, close
