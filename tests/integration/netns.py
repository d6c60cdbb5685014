"""A network namespace joined to the host by a veth pair, and a partition of it.

A process started with :meth:`Namespace.argv` lives in the namespace and
reaches the host (the root namespace) at :attr:`Namespace.host_addr` only,
over the veth link; :meth:`Namespace.cut` drops every packet on that link with
an nftables table of its own (so a TCP peer sees silence, not a reset),
:meth:`Namespace.lose` drops a random share of them instead (``numgen
random``: the kernel has no ``netem``), and :meth:`Namespace.heal` deletes
the table. Everything is removed afterwards.

Needs root, ``ip`` (iproute2) and ``nft`` (nftables): skipped locally without
them, a failure under CI.
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import shutil
import subprocess
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from support.services import missing_service

#: Where system tools live: a minimal PATH (``env -i``, cron) may leave out sbin.
SYSTEM_PATH = f"{os.environ.get('PATH', '')}:/usr/sbin:/sbin"


def _tool(name: str) -> str:
    return shutil.which(name, path=SYSTEM_PATH) or name


def _run(*argv: str, stdin: str | None = None) -> None:
    argv = (_tool(argv[0]), *argv[1:])
    done = subprocess.run(argv, input=stdin, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise AssertionError(f"{' '.join(argv)} failed: {done.stderr.strip()}")


@dataclass(frozen=True)
class Namespace:
    name: str
    host_if: str
    host_addr: str
    """The host's address on the link: where a process inside reaches the host."""
    ns_addr: str

    def argv(self, argv: Sequence[str]) -> list[str]:
        """``argv`` run inside the namespace (``ip netns exec`` execs it: same pid)."""
        return [_tool("ip"), "netns", "exec", self.name, *argv]

    def cut(self) -> None:
        """Drop every packet to and from the namespace (both directions)."""
        self._drop("")

    def lose(self, percent: int) -> None:
        """Drop ``percent`` % of the packets each way, at random (a lossy link)."""
        if not 0 < percent < 100:
            raise ValueError(f"a loss is a percentage between 0 and 100, not {percent!r}")
        self._drop(f"numgen random mod 100 < {percent} ")

    def _drop(self, match: str) -> None:
        drop = f"{match}counter drop"
        rules = f"""
table inet {self.name} {{
    chain input {{ type filter hook input priority -10; iifname "{self.host_if}" {drop}; }}
    chain output {{ type filter hook output priority -10; oifname "{self.host_if}" {drop}; }}
}}
"""
        _run("nft", "-f", "-", stdin=rules)

    def dropped(self) -> int:
        """Packets the rules dropped so far (0 when there are none)."""
        done = subprocess.run(
            (_tool("nft"), "list", "table", "inet", self.name),
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        return sum(int(n) for n in re.findall(r"packets (\d+)", done.stdout))

    def heal(self) -> None:
        _run("nft", "delete", "table", "inet", self.name)


@contextlib.contextmanager
def namespace() -> Iterator[Namespace]:
    """A fresh namespace with a /30 link to the host; removed afterwards."""
    if os.geteuid() != 0:
        missing_service("network namespaces need root")
    for tool in ("ip", "nft"):
        if shutil.which(tool, path=SYSTEM_PATH) is None:
            missing_service(f"{tool} is not installed (apt-get install iproute2 nftables)")
    tag = uuid.uuid4().hex[:8]
    rng = random.Random()
    base = f"10.{rng.randint(200, 250)}.{rng.randint(0, 255)}.{rng.randrange(0, 256, 4)}"
    prefix, last = base.rsplit(".", 1)
    space = Namespace(
        name=f"cv{tag}",
        host_if=f"vh{tag}",
        host_addr=f"{prefix}.{int(last) + 1}",
        ns_addr=f"{prefix}.{int(last) + 2}",
    )
    inner_if = f"vn{tag}"
    try:
        _run("ip", "netns", "add", space.name)
    except AssertionError as exc:
        missing_service(f"cannot create a network namespace: {exc}")
    try:
        _run("ip", "link", "add", space.host_if, "type", "veth", "peer", "name", inner_if)
        _run("ip", "link", "set", inner_if, "netns", space.name)
        _run("ip", "addr", "add", f"{space.host_addr}/30", "dev", space.host_if)
        _run("ip", "link", "set", space.host_if, "up")
        inside = [_tool("ip"), "netns", "exec", space.name]
        _run(*inside, "ip", "addr", "add", f"{space.ns_addr}/30", "dev", inner_if)
        _run(*inside, "ip", "link", "set", inner_if, "up")
        _run(*inside, "ip", "link", "set", "lo", "up")
        yield space
    finally:
        for argv in (
            ("nft", "delete", "table", "inet", space.name),
            ("ip", "link", "del", space.host_if),
            ("ip", "netns", "del", space.name),
        ):
            subprocess.run((_tool(argv[0]), *argv[1:]), capture_output=True, check=False)
