"""A second Docker engine of the tests' own: another host on a private link, with TLS and SSH.

The remote-engine tests and benchmarks need an engine that is *elsewhere*: reached over the
network, through TLS or SSH, slowed by latency, killed mid-episode. :class:`SecondEngine`
starts one on this machine that looks like that to every client:

* a **network namespace** of its own joined to this one by a **veth pair** (two addresses on a
  private /30), so it is a different host on a link (``tc netem`` adds latency to it, or a
  delaying relay where the kernel has no netem);
* a ``dockerd`` inside it (``nsenter --net=``: ``ip netns exec`` would remount ``/sys`` and hide
  the cgroup mounts dockerd needs) with its **own data root, exec root, socket, containerd and
  cgroup parent**, so nothing of it touches the machine's engine, its images or containers;
* **TLS certificates generated on the fly** (a CA, the engine's certificate for its address, a
  client certificate), the engine listening with ``--tlsverify`` on ``IP:2376`` (and, if
  asked, plain TCP on ``IP:2375``);
* optionally an **``sshd``** in the namespace (its own host key, config and authorised key;
  OpenSSH from Debian) for the SSH path.

Everything is undone by :meth:`SecondEngine.stop` (also on a failed start): containers removed,
the engine stopped (restarted first when a test killed it, so that it cleans up), leftover
processes of its cgroup killed, mounts under its folder unmounted, the folder, the veth pair and
the namespace removed. It needs root and ``ip``, ``nsenter``, ``dockerd`` (and ``tc``, ``sshd``
for those tests): :func:`second_engine_problem` says what is missing, and the tests skip with
that reason, except under ``CI=true``.
"""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

__all__ = ["SecondEngine", "host_processes", "second_engine_problem"]

FIRST_INDEX = 40
LAST_INDEX = 250
START_TIMEOUT_S = 90.0
LATENCY_PORT = 2377
"""Where the latency relay listens when the kernel has no ``tc netem`` (:meth:`add_latency`)."""


def second_engine_problem(ssh: bool = False, latency: bool = False) -> str | None:
    """Why a :class:`SecondEngine` cannot be started here, or ``None``."""
    if os.geteuid() != 0:
        return "starting a second Docker engine in a network namespace needs root"
    tools = ["ip", "nsenter", "dockerd", "docker"]
    if latency:
        tools.append("tc")
    if ssh:
        tools += ["ssh", "ssh-keygen"]
    missing = [t for t in tools if shutil.which(t) is None]
    if ssh and not Path("/usr/sbin/sshd").is_file():
        missing.append("sshd (Debian's openssh-server)")
    if missing:
        return f"missing tools for a second engine: {', '.join(missing)}"
    try:
        import cryptography  # noqa: F401
    except ImportError:
        return "the cryptography package (TLS certificates for the second engine)"
    return None


def _run(
    *command: str, check: bool = True, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed: {done.stderr.strip()[-500:]}")
    return done


def _write_certificates(folder: Path, host_ip: str) -> None:
    """A CA, the engine's certificate (for ``host_ip``) and a client certificate, as Docker's
    files: ``server/{ca,cert,key}.pem`` and ``client/{ca,cert,key}.pem``."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.timezone.utc)

    def name(text: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, text)])

    def key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
        return key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(name("mte second engine CA"))
        .issuer_name(name("mte second engine CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    ca_pem = ca.public_bytes(serialization.Encoding.PEM)
    for role, usage in (
        ("server", ExtendedKeyUsageOID.SERVER_AUTH),
        ("client", ExtendedKeyUsageOID.CLIENT_AUTH),
    ):
        key = ec.generate_private_key(ec.SECP256R1())
        builder = (
            x509.CertificateBuilder()
            .subject_name(name(f"mte second engine {role}"))
            .issuer_name(ca.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        )
        if role == "server":
            builder = builder.add_extension(
                x509.SubjectAlternativeName(
                    [
                        x509.IPAddress(ipaddress.ip_address(host_ip)),
                        x509.DNSName("localhost"),
                    ]
                ),
                critical=False,
            )
        cert = builder.sign(ca_key, hashes.SHA256())
        out = folder / role
        out.mkdir(parents=True, exist_ok=True)
        (out / "ca.pem").write_bytes(ca_pem)
        (out / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        (out / "key.pem").write_bytes(key_pem(key))
        os.chmod(out / "key.pem", 0o600)


def host_processes(match: Callable[[str], bool]) -> list[int]:
    """Pids of this host's processes whose command line (arguments joined by spaces) ``match``
    accepts: what an engine or a container left running, seen from the host."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            line = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue  # gone meanwhile
        if match(line):
            pids.append(int(entry.name))
    return pids


class SecondEngine:
    """A dockerd in a network namespace of its own (module docstring). A context manager.

    Args:
        plain_tcp: also listen without TLS on ``IP:2375`` (the issue's first measurement).
        ssh: start an ``sshd`` in the namespace (root's key in :attr:`folder`).
        insecure_registries: registries (``HOST:PORT``) the engine may pull from over HTTP.
    """

    def __init__(
        self,
        plain_tcp: bool = False,
        ssh: bool = False,
        insecure_registries: tuple[str, ...] = (),
    ) -> None:
        self.plain_tcp = plain_tcp
        self.ssh = ssh
        self.insecure_registries = insecure_registries
        self.index = 0
        self.netns = ""
        self.folder = Path()
        self.host_ip = ""
        self.peer_ip = ""
        self._dockerd: subprocess.Popen[bytes] | None = None
        self._sshd: subprocess.Popen[bytes] | None = None
        self._relays: dict[int, subprocess.Popen[bytes]] = {}
        self._log: object = None
        self.started = False

    # ------------------------------------------------------------------ names
    @property
    def veth_host(self) -> str:
        return f"mte{self.index}a"

    @property
    def veth_engine(self) -> str:
        return f"mte{self.index}b"

    @property
    def socket_path(self) -> str:
        return str(self.folder / "docker.sock")

    @property
    def cgroup_parent(self) -> str:
        return f"/mte-engine-{self.index}"

    def unix_address(self) -> str:
        """This engine through its unix socket (the test's own back door: no network)."""
        return f"unix://{self.socket_path}?name=second-unix"

    def tls_address(self, name: str = "second") -> str:
        return f"tcp://{self.host_ip}:2376?tls={self.folder / 'client'}&name={name}"

    def tcp_address(self, name: str = "second-plain") -> str:
        if not self.plain_tcp:
            raise RuntimeError("this engine was started without plain TCP")
        return f"tcp://{self.host_ip}:2375?name={name}"

    def ssh_address(self, name: str = "second-ssh") -> str:
        if not self.ssh:
            raise RuntimeError("this engine was started without sshd")
        ssh = self.folder / "ssh"
        options = f"StrictHostKeyChecking=yes,UserKnownHostsFile={ssh / 'known_hosts'}"
        return (
            f"ssh://root@{self.host_ip}?socket={self.socket_path}&identity={ssh / 'id'}"
            f"&ssh_option={options}&name={name}"
        )

    # ------------------------------------------------------------------ lifecycle
    def __enter__(self) -> SecondEngine:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        problem = second_engine_problem(ssh=self.ssh)
        if problem is not None:
            raise RuntimeError(problem)
        try:
            self._claim_namespace()
            self._link()
            self.folder = Path(f"/tmp/mte-engine-{self.index}")
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder.mkdir(mode=0o700)
            _write_certificates(self.folder, self.host_ip)
            self._start_dockerd()
            if self.ssh:
                self._start_sshd()
            self.started = True
        except BaseException:
            self.stop()
            raise

    def _claim_namespace(self) -> None:
        """The first free index: its namespace's name is the lock (``ip netns add`` fails when
        another process holds it)."""
        for index in range(FIRST_INDEX + os.getpid() % 50, LAST_INDEX):
            done = _run("ip", "netns", "add", f"mte-engine-{index}", check=False)
            if done.returncode == 0:
                self.index, self.netns = index, f"mte-engine-{index}"
                return
        raise RuntimeError("no free network namespace name mte-engine-N")

    def _link(self) -> None:
        net = ipaddress.ip_network(f"10.231.{self.index}.0/30")
        self.host_ip, self.peer_ip = str(net[2]), str(net[1])
        _run("ip", "link", "add", self.veth_host, "type", "veth", "peer", "name", self.veth_engine)
        _run("ip", "link", "set", self.veth_engine, "netns", self.netns)
        _run("ip", "addr", "add", f"{self.peer_ip}/30", "dev", self.veth_host)
        _run("ip", "link", "set", self.veth_host, "up")
        inside = ("ip", "netns", "exec", self.netns)
        _run(*inside, "ip", "addr", "add", f"{self.host_ip}/30", "dev", self.veth_engine)
        _run(*inside, "ip", "link", "set", self.veth_engine, "up")
        _run(*inside, "ip", "link", "set", "lo", "up")

    def _nsenter(self) -> list[str]:
        return ["nsenter", f"--net=/var/run/netns/{self.netns}"]

    def _start_dockerd(self) -> None:
        d = self.folder
        (d / "data").mkdir(exist_ok=True)
        (d / "exec").mkdir(exist_ok=True)
        server = d / "server"
        command = [
            *self._nsenter(),
            "dockerd",
            "--data-root",
            str(d / "data"),
            "--exec-root",
            str(d / "exec"),
            "--pidfile",
            str(d / "dockerd.pid"),
            "-H",
            f"unix://{self.socket_path}",
            "-H",
            f"tcp://{self.host_ip}:2376",
            "--tlsverify",
            "--tlscacert",
            str(server / "ca.pem"),
            "--tlscert",
            str(server / "cert.pem"),
            "--tlskey",
            str(server / "key.pem"),
            "--bridge",
            "none",
            "--iptables=false",
            "--ip-masq=false",
            "--ip-forward=false",
            "--cgroup-parent",
            self.cgroup_parent,
        ]
        for registry in self.insecure_registries:
            command += ["--insecure-registry", registry]
        log = open(d / "dockerd.log", "ab")  # noqa: SIM115 - closed in stop()
        self._log = log
        self._dockerd = subprocess.Popen(
            command, stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True
        )
        self._wait_answers()
        if self.plain_tcp:
            self._start_plain_proxy()

    def _start_plain_proxy(self) -> None:
        """Plain TCP on ``IP:2375`` next to TLS: dockerd listens on one scheme only, so a
        ``socat``-free forwarder in the namespace (Python) relays ``IP:2375`` to the socket."""
        script = (
            "import socket,threading,sys\n"
            f"s=socket.socket();s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1);"
            f"s.bind(('{self.host_ip}',2375));s.listen(64)\n"
            "def pipe(a,b):\n"
            "    try:\n"
            "        while True:\n"
            "            d=a.recv(65536)\n"
            "            if not d: break\n"
            "            b.sendall(d)\n"
            "    except OSError: pass\n"
            "    finally:\n"
            "        for x in (a,b):\n"
            "            try: x.shutdown(socket.SHUT_RDWR)\n"
            "            except OSError: pass\n"
            "while True:\n"
            "    c,_=s.accept();u=socket.socket(socket.AF_UNIX)\n"
            f"    u.connect('{self.socket_path}')\n"
            "    for a,b in ((c,u),(u,c)):\n"
            "        threading.Thread(target=pipe,args=(a,b),daemon=True).start()\n"
        )
        self._proxy = subprocess.Popen(
            [*self._nsenter(), "python3", "-I", "-c", script],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and self._proxy.poll() is None:
            with contextlib.suppress(OSError), socket.create_connection((self.host_ip, 2375), 1):
                return
            time.sleep(0.05)
        raise RuntimeError("the plain-TCP relay of the second engine did not start")

    def _wait_answers(self, timeout_s: float = START_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._dockerd is not None and self._dockerd.poll() is not None:
                tail = (self.folder / "dockerd.log").read_text(errors="replace")[-1500:]
                raise RuntimeError(f"the second dockerd exited: {tail}")
            done = _run("docker", "-H", f"unix://{self.socket_path}", "version", check=False)
            if done.returncode == 0:
                return
            time.sleep(0.3)
        raise RuntimeError(f"the second dockerd did not answer within {timeout_s:g} s")

    def _start_sshd(self) -> None:
        ssh = self.folder / "ssh"
        ssh.mkdir(mode=0o700)
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege separation dir
        _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(ssh / "host"))
        _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(ssh / "id"))
        shutil.copy(ssh / "id.pub", ssh / "authorized_keys")
        host_key = (ssh / "host.pub").read_text().split()
        (ssh / "known_hosts").write_text(f"{self.host_ip} {host_key[0]} {host_key[1]}\n")
        (ssh / "sshd_config").write_text(
            "\n".join(
                [
                    f"ListenAddress {self.host_ip}",
                    "Port 22",
                    f"HostKey {ssh / 'host'}",
                    f"PidFile {ssh / 'sshd.pid'}",
                    f"AuthorizedKeysFile {ssh / 'authorized_keys'}",
                    "PermitRootLogin prohibit-password",
                    "PasswordAuthentication no",
                    "KbdInteractiveAuthentication no",
                    "UsePAM no",
                    "StrictModes no",
                    "AllowStreamLocalForwarding yes",
                    "",
                ]
            )
        )
        self._sshd = subprocess.Popen(
            [*self._nsenter(), "/usr/sbin/sshd", "-D", "-e", "-f", str(ssh / "sshd_config")],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=open(ssh / "sshd.log", "ab"),  # noqa: SIM115 - the child holds it
            start_new_session=True,
        )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError), socket.create_connection((self.host_ip, 22), 1):
                return
            if self._sshd.poll() is not None:
                break
            time.sleep(0.1)
        log = (ssh / "sshd.log").read_text(errors="replace")[-800:]
        raise RuntimeError(f"sshd in the second engine's namespace did not start: {log}")

    # ------------------------------------------------------------------ faults
    def add_latency(self, ms: float) -> str:
        """Delay what the engine sends by ``ms`` and return the TLS address that sees it.

        ``tc netem`` on the engine's side of the link where the kernel has it (every packet
        delayed: the plain :meth:`tls_address`); a kernel without ``sch_netem`` (some VMs) gets
        a relay in the namespace instead, on ``IP:2377``, that holds each chunk the engine
        sends for ``ms`` before passing it on, in order (the same added round trip for every
        request and stream; the address returned is the relay's)."""
        done = _run(
            "ip", "netns", "exec", self.netns, "tc", "qdisc", "replace", "dev", self.veth_engine,
            "root", "netem", "delay", f"{float(ms):g}ms", check=False,
        )  # fmt: skip
        if done.returncode == 0:
            return self.tls_address()
        if "unknown" not in done.stderr:
            raise RuntimeError(f"tc netem failed: {done.stderr.strip()[-300:]}")
        self._start_relay(LATENCY_PORT, (self.host_ip, 2376), float(ms) / 1000.0)
        return f"tcp://{self.host_ip}:{LATENCY_PORT}?tls={self.folder / 'client'}&name=latency"

    def clear_latency(self) -> None:
        _run(
            "ip", "netns", "exec", self.netns, "tc", "qdisc", "del", "dev", self.veth_engine,
            "root", check=False,
        )  # fmt: skip
        relay = self._relays.pop(LATENCY_PORT, None)
        if relay is not None and relay.poll() is None:
            relay.kill()
            relay.wait(timeout=10)

    def _start_relay(self, port: int, target: tuple[str, int], delay_s: float) -> None:
        """A TCP relay in the namespace from ``IP:port`` to ``target``, delaying the replies
        by ``delay_s`` (each chunk queued with the time it may leave)."""
        script = (
            "import socket,threading,time,queue\n"
            f"D={delay_s!r}\n"
            "s=socket.socket();s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)\n"
            f"s.bind(('{self.host_ip}',{int(port)}));s.listen(64)\n"
            "def close(a,b):\n"
            "    for x in (a,b):\n"
            "        try: x.shutdown(socket.SHUT_RDWR)\n"
            "        except OSError: pass\n"
            "def up(a,b):\n"
            "    try:\n"
            "        while (d:=a.recv(65536)): b.sendall(d)\n"
            "    except OSError: pass\n"
            "    close(a,b)\n"
            "def down(a,b):\n"
            "    q=queue.Queue()\n"
            "    def send():\n"
            "        try:\n"
            "            while (item:=q.get()) is not None:\n"
            "                time.sleep(max(0.0,item[0]-time.monotonic())); b.sendall(item[1])\n"
            "        except OSError: pass\n"
            "        close(a,b)\n"
            "    threading.Thread(target=send,daemon=True).start()\n"
            "    try:\n"
            "        while (d:=a.recv(65536)): q.put((time.monotonic()+D,d))\n"
            "    except OSError: pass\n"
            "    q.put(None)\n"
            "while True:\n"
            "    c,_=s.accept();u=socket.create_connection(" + repr(target) + ")\n"
            "    threading.Thread(target=up,args=(c,u),daemon=True).start()\n"
            "    threading.Thread(target=down,args=(u,c),daemon=True).start()\n"
        )
        relay = subprocess.Popen(
            [*self._nsenter(), "python3", "-I", "-c", script],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        self._relays[port] = relay
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and relay.poll() is None:
            with contextlib.suppress(OSError), socket.create_connection((self.host_ip, port), 1):
                return
            time.sleep(0.05)
        raise RuntimeError(f"the relay on {self.host_ip}:{port} did not start")

    def _containerd_pids(self) -> list[int]:
        """containerd of this engine (started by its dockerd, found by its exec root)."""
        marker = str(self.folder / "exec")
        return host_processes(lambda line: line.startswith("containerd ") and marker in line)

    def kill(self) -> None:
        """The engine goes away at once: ``SIGKILL`` to its dockerd and its containerd (the
        containers' processes stay, as on a host whose engine crashed, until :meth:`restart`
        or :meth:`stop`)."""
        for pid in [*([self._dockerd.pid] if self._dockerd else []), *self._containerd_pids()]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if self._dockerd is not None:
            with contextlib.suppress(Exception):
                self._dockerd.wait(timeout=10)

    def restart(self) -> None:
        """Start the engine again on the same data root (after :meth:`kill`)."""
        if self._dockerd is not None and self._dockerd.poll() is None:
            return
        self._start_dockerd()

    def alive(self) -> bool:
        return self._dockerd is not None and self._dockerd.poll() is None

    # ------------------------------------------------------------------ teardown
    def stop(self) -> None:
        """Undo everything (module docstring); never raises."""
        with contextlib.suppress(Exception):
            if self._sshd is not None and self._sshd.poll() is None:
                self._sshd.terminate()
                self._sshd.wait(timeout=10)
        for proxy in [getattr(self, "_proxy", None), *self._relays.values()]:
            with contextlib.suppress(Exception):
                if proxy is not None and proxy.poll() is None:
                    proxy.kill()
                    proxy.wait(timeout=10)
        self._relays.clear()
        if self._dockerd is not None:
            with contextlib.suppress(Exception):
                if not self.alive():
                    self.restart()  # a killed engine cleans its containers up when it starts
            with contextlib.suppress(Exception):
                ids = _run(
                    "docker", "-H", f"unix://{self.socket_path}", "ps", "-aq", check=False
                ).stdout.split()
                if ids:
                    _run(
                        "docker", "-H", f"unix://{self.socket_path}", "rm", "-f", "-v", *ids,
                        check=False, timeout=120,
                    )  # fmt: skip
            with contextlib.suppress(Exception):
                if self._dockerd.poll() is None:
                    self._dockerd.terminate()
                    self._dockerd.wait(timeout=60)
            with contextlib.suppress(Exception):
                if self._dockerd.poll() is None:
                    self._dockerd.kill()
                    self._dockerd.wait(timeout=10)
            for pid in self._containerd_pids():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        self._kill_cgroup()
        self._unmount()
        if self._log is not None:
            with contextlib.suppress(Exception):
                self._log.close()  # type: ignore[attr-defined]
        if self.folder != Path() and str(self.folder).startswith("/tmp/mte-engine-"):
            shutil.rmtree(self.folder, ignore_errors=True)
        if self.veth_host and self.index:
            _run("ip", "link", "del", self.veth_host, check=False)
        if self.netns:
            _run("ip", "netns", "del", self.netns, check=False)
            self.netns = ""
        self.started = False

    def _kill_cgroup(self) -> None:
        """Kill whatever still runs in the engine's cgroups (a container a crash left)."""
        if not self.index:
            return
        for root in Path("/sys/fs/cgroup").glob("*"):
            parent = root / self.cgroup_parent.strip("/")
            if not parent.is_dir():
                continue
            for procs in parent.rglob("cgroup.procs"):
                with contextlib.suppress(OSError):
                    for pid in procs.read_text().split():
                        with contextlib.suppress(ProcessLookupError, ValueError):
                            os.kill(int(pid), signal.SIGKILL)
            for child in sorted(parent.rglob("*"), key=lambda p: -len(p.parts)):
                if child.is_dir():
                    with contextlib.suppress(OSError):
                        child.rmdir()
            with contextlib.suppress(OSError):
                parent.rmdir()

    def _unmount(self) -> None:
        if self.folder == Path():
            return
        prefix = str(self.folder) + "/"
        with contextlib.suppress(OSError):
            mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]
            for point in sorted((m for m in mounts if m.startswith(prefix)), key=len, reverse=True):
                _run("umount", "-l", point, check=False)
