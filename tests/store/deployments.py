"""Real Redis Cluster and Sentinel deployments for the store tests, on random loopback ports."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import redis

from tests.store.conftest import REDIS_SERVER, RedisServer

REDIS_CLI = shutil.which("redis-cli")


def _poll(predicate, timeout: float, what: str) -> None:
    """Bounded polling for something real servers do in the background."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if predicate():
                return
        except redis.RedisError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.05)


class Cluster:
    """``primaries`` primaries with ``replicas`` replicas each, built with ``redis-cli --cluster create``."""

    def __init__(self, workdir: Path, primaries: int = 3, replicas: int = 0, password: str | None = None) -> None:
        self.password = password
        auth = [f'requirepass "{password}"', f'masterauth "{password}"'] if password else []
        self.nodes = []
        for index in range(primaries * (1 + replicas)):
            directory = workdir / f"node{index}"
            directory.mkdir()
            lines = [
                "cluster-enabled yes",
                "cluster-config-file nodes.conf",
                "cluster-node-timeout 1000",
                *auth,
            ]
            self.nodes.append(RedisServer(directory, lines))
        self.replicas = replicas

    def start(self) -> None:
        for node in self.nodes:
            node.start()
        command = [REDIS_CLI, "--cluster", "create", *(f"127.0.0.1:{n.port}" for n in self.nodes)]
        command += ["--cluster-replicas", str(self.replicas), "--cluster-yes"]
        if self.password:
            command += ["-a", self.password, "--no-auth-warning"]
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=60)
        _poll(self.healthy, 30, "the cluster to be ready")

    def client(self, node: RedisServer) -> redis.Redis:
        return redis.Redis(port=node.port, password=self.password, socket_timeout=5)

    def healthy(self) -> bool:
        """Every live node sees the whole cluster OK, and every replica is in sync."""
        for node in self.live():
            with self.client(node) as client:
                info = client.cluster("info")
                if info.get("cluster_state") != "ok":
                    return False
                replication = client.info("replication")
                if replication.get("role") == "slave" and replication.get("master_link_status") != "up":
                    return False
        return True

    def live(self) -> list[RedisServer]:
        return [n for n in self.nodes if n.process is not None and n.process.poll() is None]

    def cluster_client(self) -> redis.cluster.RedisCluster:
        node = self.live()[0]
        return redis.cluster.RedisCluster(host="127.0.0.1", port=node.port, password=self.password)

    def node_for_slot(self, slot: int) -> RedisServer:
        """The live node serving ``slot`` as primary."""
        with self.client(self.live()[0]) as client:
            for start, end, primary, *_ in client.execute_command("CLUSTER", "SLOTS"):
                if start <= slot <= end:
                    port = int(primary[1])
                    return next(n for n in self.nodes if n.port == port)
        raise LookupError(slot)

    def primaries(self) -> list[RedisServer]:
        ports = set()
        with self.client(self.live()[0]) as client:
            for _start, _end, primary, *_ in client.execute_command("CLUSTER", "SLOTS"):
                ports.add(int(primary[1]))
        return [n for n in self.nodes if n.port in ports]

    def url(self, scheme: str = "redis") -> str:
        auth = f":{self.password}@" if self.password else ""
        return f"{scheme}://{auth}127.0.0.1:{self.nodes[0].port}"

    def stop(self) -> None:
        for node in self.nodes:  # nothing to keep: SIGKILL is the quickest way down
            node.kill()


class SentinelSet:
    """A primary, a replica and one Sentinel watching them (service ``mymaster``)."""

    SERVICE = "mymaster"

    def __init__(
        self,
        workdir: Path,
        password: str | None = None,
        sentinel_password: str | None = None,
        promotable: bool = False,
    ) -> None:
        self.promotable = promotable
        self.password = password
        self.sentinel_password = sentinel_password
        auth = [f'requirepass "{password}"', f'masterauth "{password}"'] if password else []
        (workdir / "primary").mkdir()
        (workdir / "replica").mkdir()
        (workdir / "sentinel").mkdir()
        self.primary = RedisServer(workdir / "primary", auth)
        self.replica = RedisServer(workdir / "replica", [*auth, f"replicaof 127.0.0.1 {self.primary.port}"])
        lines = [
            "sentinel resolve-hostnames yes",
            f"sentinel monitor {self.SERVICE} 127.0.0.1 {self.primary.port} 1",
            f"sentinel down-after-milliseconds {self.SERVICE} 1000",
            f"sentinel failover-timeout {self.SERVICE} 5000",
        ]
        if password:
            lines.append(f'sentinel auth-pass {self.SERVICE} "{password}"')
        if sentinel_password:
            lines.append(f'requirepass "{sentinel_password}"')
        self.sentinel = RedisServer(workdir / "sentinel", lines, sentinel=True)

    def start(self) -> None:
        self.primary.start()
        self.replica.start()
        _poll(self._replica_in_sync, 20, "the replica to sync")
        self.sentinel.start()
        # Sentinel promotes only a replica it has fresh replication details of (it asks every 10 s at first)
        _poll(
            lambda: self.primary_port() == self.primary.port and (not self.promotable or self._sentinel_sees_replica()),
            30,
            "sentinel",
        )

    def sentinel_client(self) -> redis.Redis:
        return redis.Redis(port=self.sentinel.port, password=self.sentinel_password, socket_timeout=5)

    def primary_port(self) -> int:
        with self.sentinel_client() as client:
            return int(client.sentinel_get_master_addr_by_name(self.SERVICE)[1])

    def _sentinel_sees_replica(self) -> bool:
        """Sentinel knows the replica, reaches it and has its replication state (it can be promoted)."""
        with self.sentinel_client() as client:
            replicas = client.sentinel_slaves(self.SERVICE)
        return any(
            r.get("is_slave")
            and not r.get("is_disconnected")
            and not r.get("is_sdown")
            and r.get("master-link-status") == "ok"
            and int(r.get("info-refresh", 10**9)) < 2000
            for r in replicas
        )

    def _replica_in_sync(self) -> bool:
        with redis.Redis(port=self.replica.port, password=self.password, socket_timeout=5) as client:
            return client.info("replication").get("master_link_status") == "up"

    def url(self) -> str:
        auth = f":{self.password}@" if self.password else ""
        query = f"?sentinel_password={self.sentinel_password}" if self.sentinel_password else ""
        return f"redis+sentinel://{auth}127.0.0.1:{self.sentinel.port}/{self.SERVICE}/0{query}"

    def stop(self) -> None:
        for server in (self.sentinel, self.replica, self.primary):  # nothing to keep: SIGKILL is quickest
            server.kill()


__all__ = ["REDIS_CLI", "REDIS_SERVER", "Cluster", "SentinelSet"]
