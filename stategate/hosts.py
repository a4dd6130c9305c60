"""Hosts on one machine: each a Linux network namespace with its own address on one bridge,
for the tests and the benchmark that put every node, the pipeline, the snapshot store and
each coordinator member on a host of its own, and cut the network between them.

The bridge lives in this process's namespace and has the network's first address: the test
process itself is the clients' host. Every address is in a /24 of 10.213.0.0/16 that no
interface of this machine uses, and only hosts made here are ever targets. Faults are nftables
rules inside a host's namespace (packets dropped silently, as a partition loses them) or its
link set down. Needs root, `ip` and `nft` (Debian's nftables, installed by `make test`);
`Network.unavailable()` says why not, if it cannot be made here.

Names carry the pid of the process that made them (`sg<pid>-<host>`), so a network whose
maker died (a killed test run) is removed by the next one: nothing is left behind.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import shutil
import subprocess
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

NFT = "nft"
IP = "ip"
PREFIX = "sg"  # every namespace and interface made here starts with it
SUPERNET = ipaddress.IPv4Network("10.213.0.0/16")
FIRST_HOST = 11  # .1 is the bridge (the clients' host)
TABLE = "stategate"
RULES = f"""table inet {TABLE} {{
  chain incoming {{ type filter hook input priority 0; policy accept; }}
  chain outgoing {{ type filter hook output priority 0; policy accept; }}
}}"""


class NetworkError(Exception):
    """A command that builds or changes the network failed."""


@dataclass(frozen=True)
class Host:
    name: str  # as the tests call it: "node1", "etcd2", "pipeline"
    namespace: str
    address: str
    link: str  # the host's end of its veth pair, in this process's namespace


class Network:
    """Namespaces on a bridge, made by `up()` and removed whole by `down()`."""

    def __init__(self, names: Sequence[str]) -> None:
        self.tag = f"{PREFIX}{os.getpid()}"
        self.subnet = _free_subnet()
        addresses = list(self.subnet.hosts())
        self.client_address = str(addresses[0])
        yours = addresses[FIRST_HOST - 1 : FIRST_HOST - 1 + len(names)]
        self.bridge = f"{self.tag}b"
        self.hosts = {
            name: Host(name, f"{self.tag}-{name}", str(address), f"{self.tag}v{i}")
            for i, (name, address) in enumerate(zip(names, yours, strict=True))
        }

    @staticmethod
    def unavailable() -> str | None:
        """Why namespaces cannot be made here, or None."""
        if os.geteuid() != 0:
            return "network namespaces need root"
        for tool, package in ((IP, "iproute2"), (NFT, "nftables"), ("tcpdump", "tcpdump")):
            if shutil.which(tool) is None:
                return f"`{tool}` is missing (Debian's {package})"
        return None

    def up(self) -> Network:
        remove_orphans()
        try:
            _run(IP, "link", "add", self.bridge, "type", "bridge")
            mine = f"{self.client_address}/{self.subnet.prefixlen}"
            _run(IP, "addr", "add", mine, "dev", self.bridge)
            _run(IP, "link", "set", self.bridge, "up")
            for host in self.hosts.values():
                self._make(host)
        except BaseException:
            self.down()
            raise
        return self

    def down(self) -> None:
        """Kill every process inside the hosts, then remove them and the bridge."""
        for host in self.hosts.values():
            _remove_namespace(host.namespace)
        _quiet(IP, "link", "del", self.bridge)

    def address(self, name: str) -> str:
        return self.hosts[name].address

    def command(self, name: str, command: Sequence[str]) -> list[str]:
        """`command` as run on the host (`ip netns exec` execs it: the pid is the command's)."""
        return [IP, "netns", "exec", self.hosts[name].namespace, *command]

    def drop(self, source: str, target: str) -> None:
        """Packets from `source` to `target` vanish; the other way they still arrive."""
        self._rule(source, "outgoing", "daddr", self.address(target))

    def cut(self, name: str, *others: str) -> None:
        """No packet between `name` and each of `others`, either way (`others` may name the
        clients' host as "clients")."""
        for other in others:
            address = self.client_address if other == "clients" else self.address(other)
            self._rule(name, "outgoing", "daddr", address)
            self._rule(name, "incoming", "saddr", address)

    def heal(self, *names: str) -> None:
        """Remove every rule (of `names`, or of every host) and set every link up."""
        for name in names or list(self.hosts):
            namespace = self.hosts[name].namespace
            for chain in ("incoming", "outgoing"):
                _run(IP, "netns", "exec", namespace, NFT, "flush", "chain", "inet", TABLE, chain)
            self.link(name, up=True)

    def link(self, name: str, up: bool) -> None:
        """Set the host's only link down (its peers see it unreachable) or up again."""
        _run(IP, "link", "set", self.hosts[name].link, "up" if up else "down")

    def _rule(self, name: str, chain: str, field: str, address: str) -> None:
        namespace = self.hosts[name].namespace
        _run(IP, "netns", "exec", namespace, NFT, "add", "rule", "inet", TABLE, chain,
             "ip", field, address, "drop")  # fmt: skip

    def _make(self, host: Host) -> None:
        inside = f"{host.link}i"
        _run(IP, "netns", "add", host.namespace)
        _run(IP, "link", "add", host.link, "type", "veth", "peer", "name", inside)
        _run(IP, "link", "set", inside, "netns", host.namespace)
        _run(IP, "link", "set", host.link, "master", self.bridge)
        _run(IP, "link", "set", host.link, "up")
        ns = ("-n", host.namespace)
        _run(IP, *ns, "link", "set", inside, "name", "eth0")
        _run(IP, *ns, "addr", "add", f"{host.address}/{self.subnet.prefixlen}", "dev", "eth0")
        _run(IP, *ns, "link", "set", "eth0", "up")
        _run(IP, *ns, "link", "set", "lo", "up")
        _run(IP, "netns", "exec", host.namespace, NFT, "-f", "-", stdin=RULES)


@contextlib.contextmanager
def network(names: Sequence[str]) -> Iterator[Network]:
    made = Network(names).up()
    try:
        yield made
    finally:
        made.down()


def remove_orphans() -> None:
    """Remove the namespaces and bridges of networks whose maker is no longer running."""
    for line in _output(IP, "netns", "list").splitlines():
        namespace = line.split()[0] if line.strip() else ""
        pid = _maker(namespace.split("-", 1)[0])
        if pid is not None and not _running(pid):
            _remove_namespace(namespace)
    for line in _output(IP, "-o", "link", "show", "type", "bridge").splitlines():
        name = line.split(":")[1].strip().split("@")[0]
        pid = _maker(name.removesuffix("b"))
        if pid is not None and not _running(pid):
            _quiet(IP, "link", "del", name)


def _maker(tag: str) -> int | None:
    digits = tag.removeprefix(PREFIX)
    return int(digits) if tag.startswith(PREFIX) and digits.isdigit() else None


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _free_subnet() -> ipaddress.IPv4Network:
    """A /24 of SUPERNET that no address of this machine is in, picked by this process's pid
    so that two runs at once take different ones."""
    shown = _output(IP, "-o", "-4", "addr", "show")
    used = {ipaddress.IPv4Interface(word).network for line in shown.splitlines()
            for word in line.split()[3:4]}  # fmt: skip
    subnets = list(SUPERNET.subnets(new_prefix=24))[1:]
    start = os.getpid() % len(subnets)
    for subnet in subnets[start:] + subnets[:start]:
        if not any(subnet.overlaps(u) for u in used):
            return subnet
    raise NetworkError(f"no free /24 in {SUPERNET}")


def _remove_namespace(namespace: str) -> None:
    for pid in _output(IP, "netns", "pids", namespace).split():
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(pid), 9)
    _quiet(IP, "netns", "del", namespace)


def _run(*command: str, stdin: str | None = None) -> None:
    done = subprocess.run(command, input=stdin, capture_output=True, text=True)
    if done.returncode != 0:
        raise NetworkError(f"{' '.join(command)}: {done.stderr.strip()}")


def _output(*command: str) -> str:
    return subprocess.run(command, capture_output=True, text=True).stdout


def _quiet(*command: str) -> None:
    subprocess.run(command, capture_output=True)
