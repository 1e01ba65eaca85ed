"""A network namespace joined to this one by a veth pair, whose paths can be cut one at a time.

`network_namespace` makes a namespace, joins it to the root namespace with
one veth pair and gives each named *path* a /24 of its own on that pair: an
``outside`` address on the root side and an ``inside`` address in the
namespace.  A process started in the namespace (`NetNamespace.command`, which
is ``ip netns exec``) reaches the root side's servers on their ``outside``
addresses, and the root side reaches the process's listeners on their
``inside`` addresses::

    root namespace                              namespace kfs-<i>-<pid>
    ──────────────                              ───────────────────────
    clients  ── 10.213.<4i>.1   ── veth ──  10.213.<4i>.2   Kafka listener
    moto S3     10.213.<4i+1>.1 ── pair ──  10.213.<4i+1>.2 (S3 requests' source)
    /metrics ── 10.213.<4i+2>.1 ────────    10.213.<4i+2>.2 ops listener

`NetNamespace.cut` drops one path in both directions with two blackhole
routes: in the namespace to the path's ``outside`` address, in the root
namespace to its ``inside`` one.  ``one_way=True`` drops only what the
namespace sends: requests still arrive, their answers never leave.  Packets
on the other paths flow as before, so a daemon can lose the store while its
clients and its /metrics still reach it, or the other way round.  Locally
sent packets meet the blackhole at routing: a new connection fails at once
(``EINVAL``), an established one hangs until its own timeouts, and both
carry on once `NetNamespace.restore` deletes the routes.

Several test processes can each hold namespaces at once: index ``i``
(0..63) is claimed by creating the root side's veth ``kfs<i>o``, which only
one process can do, and the namespace's name carries the claimer's pid.
Everything is removed when the context exits, on failure too; what a killed
process left behind is removed by the next claim that finds its pid gone.

Needs root and iproute2's ``ip``; `require` raises `NetnsUnavailable`
saying what is missing, for a test to fail on rather than skip.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

__all__ = ["NetNamespace", "NetPath", "NetnsUnavailable", "network_namespace", "require"]

#: The /16 every namespace's paths are numbered in: ``10.213.<4 * index + path>.0/24``.
BLOCK = ipaddress.IPv4Network("10.213.0.0/16")
#: Paths a namespace can have (each its /24) and namespaces that can exist at once.
MAX_PATHS = 4
MAX_NAMESPACES = 64
#: The paths a `kfs serve` daemon in a namespace uses, by name.
DAEMON_PATHS = ("clients", "store", "observer")
_NAME = re.compile(r"^kfs-(\d+)-(\d+)$")


class NetnsUnavailable(RuntimeError):
    """Network namespaces cannot be made here (not root, or no ``ip``)."""


@dataclass(frozen=True)
class NetPath:
    """One path between the namespace and the root side: a /24 and an address at each end."""

    name: str
    network: ipaddress.IPv4Network

    @property
    def outside(self) -> str:
        """The root side's address (``.1``): where a process inside reaches the root side."""
        return str(self.network.network_address + 1)

    @property
    def inside(self) -> str:
        """The namespace's address (``.2``): where the root side reaches a process inside."""
        return str(self.network.network_address + 2)


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if check and done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip() or done.returncode}")
    return done


def require() -> None:
    """Raise `NetnsUnavailable` unless this process can make network namespaces."""
    if shutil.which("ip") is None:
        raise NetnsUnavailable("network namespaces need iproute2's `ip` (apt-get install iproute2)")
    if os.geteuid() != 0:
        raise NetnsUnavailable("network namespaces need root: run the tests as root")
    if _ip("netns", "list", check=False).returncode != 0:
        raise NetnsUnavailable("`ip netns list` fails: this kernel or sandbox has no netns")


@dataclass
class NetNamespace:
    """A namespace, its veth pair and its paths; made by `network_namespace`."""

    name: str
    index: int
    paths: dict[str, NetPath]
    cut_paths: dict[str, bool] = field(default_factory=dict)  # name -> one_way

    @property
    def outer_link(self) -> str:
        return f"kfs{self.index}o"

    @property
    def inner_link(self) -> str:
        return f"kfs{self.index}i"

    def inside(self, path: str) -> str:
        """The namespace's address on ``path``."""
        return self.paths[path].inside

    def outside(self, path: str) -> str:
        """The root side's address on ``path``."""
        return self.paths[path].outside

    def command(self, argv: Sequence[str]) -> list[str]:
        """``argv`` run in the namespace (``ip netns exec`` execs it: same pid, same signals)."""
        return ["ip", "netns", "exec", self.name, *argv]

    def run(self, argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` in the namespace to its end; its output captured, never raising."""
        return subprocess.run(self.command(argv), capture_output=True, text=True, check=False)

    def cut(self, path: str, *, one_way: bool = False) -> None:
        """Drop every packet on ``path`` (``one_way``: only what the namespace sends on it)."""
        assert path not in self.cut_paths, f"{path} is cut already"
        p = self.paths[path]
        _ip("-n", self.name, "route", "add", "blackhole", f"{p.outside}/32")
        if not one_way:
            _ip("route", "add", "blackhole", f"{p.inside}/32")
        self.cut_paths[path] = one_way

    def restore(self, path: str) -> None:
        """Let ``path`` carry packets again."""
        one_way = self.cut_paths.pop(path)
        p = self.paths[path]
        _ip("-n", self.name, "route", "del", "blackhole", f"{p.outside}/32")
        if not one_way:
            _ip("route", "del", "blackhole", f"{p.inside}/32")

    def close(self) -> None:
        """Remove the routes, the veth pair and the namespace (what exists of them)."""
        _remove(self.name, self.index)
        self.cut_paths.clear()


def _networks(index: int) -> list[ipaddress.IPv4Network]:
    first = int(BLOCK.network_address) + (index * MAX_PATHS << 8)
    return [ipaddress.IPv4Network((first + (k << 8), 24)) for k in range(MAX_PATHS)]


def _remove(name: str, index: int) -> None:
    """Undo `_make` for ``(name, index)``, each step whatever the others did."""
    for network in _networks(index):
        inside = network.network_address + 2
        _ip("route", "del", "blackhole", f"{inside}/32", check=False)
    _ip("link", "del", f"kfs{index}o", check=False)  # takes its peer with it
    _ip("netns", "del", name, check=False)


def _reap_stale() -> None:
    """Remove the namespaces of processes that are gone (killed before they cleaned up)."""
    for entry in json.loads(_ip("-j", "netns", "list").stdout or "[]"):
        match = _NAME.match(entry.get("name", ""))
        if match is None:
            continue
        index, pid = int(match.group(1)), int(match.group(2))
        if pid != os.getpid() and not os.path.exists(f"/proc/{pid}"):
            _remove(entry["name"], index)


def _in_use_elsewhere(networks: list[ipaddress.IPv4Network]) -> bool:
    """Whether an address of the root namespace lies in one of ``networks``."""
    for link in json.loads(_ip("-j", "-4", "addr", "show").stdout or "[]"):
        for info in link.get("addr_info", []):
            address = ipaddress.ip_address(info["local"])
            if any(address in network for network in networks):
                return True
    return False


def _make(index: int, paths: Sequence[str]) -> NetNamespace | None:
    """Claim index ``index`` and set it up; None if another process holds it."""
    networks = _networks(index)[: len(paths)]
    name = f"kfs-{index}-{os.getpid()}"
    if _in_use_elsewhere(networks) or _ip("netns", "add", name, check=False).returncode != 0:
        return None
    ns = NetNamespace(name, index, {p: NetPath(p, n) for p, n in zip(paths, networks, strict=True)})
    claimed = _ip(
        "link", "add", ns.outer_link, "type", "veth", "peer", "name", ns.inner_link,
        "netns", name, check=False,
    )  # fmt: skip
    if claimed.returncode != 0:  # the veth name is taken: another process holds the index
        _ip("netns", "del", name, check=False)
        return None
    try:
        for p in ns.paths.values():
            prefix = p.network.prefixlen
            _ip("addr", "add", f"{p.outside}/{prefix}", "dev", ns.outer_link)
            _ip("-n", name, "addr", "add", f"{p.inside}/{prefix}", "dev", ns.inner_link)
        _ip("link", "set", ns.outer_link, "up")
        _ip("-n", name, "link", "set", ns.inner_link, "up")
        _ip("-n", name, "link", "set", "lo", "up")
    except BaseException:
        ns.close()
        raise
    return ns


@contextlib.contextmanager
def network_namespace(paths: Sequence[str] = DAEMON_PATHS) -> Iterator[NetNamespace]:
    """A fresh namespace with one /24 per name in ``paths``; removed on exit, failure or not."""
    require()
    if not 0 < len(paths) <= MAX_PATHS or len(set(paths)) != len(paths):
        raise ValueError(f"a namespace has 1 to {MAX_PATHS} distinct paths, not {paths!r}")
    _reap_stale()
    for index in range(MAX_NAMESPACES):
        ns = _make(index, paths)
        if ns is not None:
            break
    else:
        raise RuntimeError(f"all {MAX_NAMESPACES} test network namespaces are in use")
    try:
        yield ns
    finally:
        ns.close()
