"""One etcd client at a time over a list of endpoints, with every call bounded and mapped to StoreError.

The client is made on first use (on the caller's event loop). Endpoints are probed in order with a
linearizable read, each given an equal share of what remains of the call's deadline; the first that
answers is used until a call fails, after which the next call probes again from the first endpoint.
A failed call is not retried on another endpoint: a write that timed out may have been applied, so
the error says its outcome is unknown and the caller re-reads. Every call (probe included) is
bounded by the request timeout. With TLS configured, the channel is TLS with the client certificate
(aetcd itself only opens plaintext channels; `TlsEtcdClient` adds that).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

import aetcd
import aetcd.rpc
import aetcd.watcher
import grpc

from motor.common.config.tls import ClientTlsConfig
from motor.common.grpc_server import channel_credentials
from motor.controller.persistence.errors import StoreError

logger = logging.getLogger(__name__)

T = TypeVar("T")

# A single etcd response holds every record in load_all; gRPC's 4 MiB default would cap the number
# of instances far below what etcd itself accepts.
_MAX_RECEIVE_BYTES = 64 * 1024 * 1024
_CLOSE_TIMEOUT_SEC = 1.0


class TlsEtcdClient(aetcd.Client):
    """aetcd's client over a TLS channel (CA, and the client certificate when configured)."""

    def __init__(self, *args, tls: ClientTlsConfig, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._tls = tls

    async def connect(self) -> None:
        # aetcd's connect with grpc.aio.secure_channel instead of its insecure one; no user/password.
        if self._connected.is_set():
            return
        if self._is_connecting:
            async with asyncio.timeout(self._connect_wait_timeout):
                await self._connected.wait()
            return
        try:
            self._is_connecting = True
            options = list(self._options.items())
            if self._tls.server_name_override:
                options.append(("grpc.ssl_target_name_override", self._tls.server_name_override))
            self.channel = grpc.aio.secure_channel(f"{self._host}:{self._port}", channel_credentials(self._tls),
                                                   options=options)
            self.kvstub = aetcd.rpc.KVStub(self.channel)
            self.clusterstub = aetcd.rpc.ClusterStub(self.channel)
            self.leasestub = aetcd.rpc.LeaseStub(self.channel)
            self.maintenancestub = aetcd.rpc.MaintenanceStub(self.channel)
            self._watcher = aetcd.watcher.Watcher(aetcd.rpc.WatchStub(self.channel), timeout=self._timeout,
                                                  metadata=self.metadata)
            self._connected.set()
        finally:
            self._is_connecting = False


class EtcdConnection:
    """The connection of one EtcdRuntimeStore; `prefix` is the key the probe reads and logs name."""

    def __init__(self, endpoints: Sequence[tuple[str, str, int]], *, prefix: str, timeout_sec: float,
                 tls: ClientTlsConfig | None = None,
                 client_factory: Callable[[str, int], aetcd.Client] | None = None) -> None:
        """`client_factory(host, port)`: makes the etcd clients (default: aetcd's, over TLS when
        `tls` is set); the simulation passes clients of an in-memory etcd."""
        # (endpoint as configured, host, port), in the order to try them.
        self._endpoints = list(endpoints)
        self._prefix = prefix
        self._timeout_sec = timeout_sec
        self._tls = tls
        self._client_factory = client_factory
        self._client: aetcd.Client | None = None
        self._endpoint: str | None = None
        self._connect_lock = asyncio.Lock()
        # Failed clients still closing (after a grace for calls running on them).
        self._retiring: dict[asyncio.Task[None], aetcd.Client] = {}
        self._closed = False
        # Calls between their start and their outcome (tests wait on it instead of on time).
        self.in_flight = 0

    @property
    def timeout_sec(self) -> float:
        """The bound of every call."""
        return self._timeout_sec

    def _new_client(self, host: str, port: int) -> aetcd.Client:
        if self._client_factory is not None:
            return self._client_factory(host, port)
        options = {"grpc.max_receive_message_length": _MAX_RECEIVE_BYTES}
        if self._tls is not None:
            return TlsEtcdClient(host=host, port=port, timeout=self._timeout_sec,  # type: ignore[arg-type]
                                 options=options, tls=self._tls)
        return aetcd.Client(host=host, port=port, timeout=self._timeout_sec,  # type: ignore[arg-type]
                            options=options)

    async def _connect(self, deadline: float, key: str) -> tuple[aetcd.Client, str]:
        loop = asyncio.get_running_loop()
        async with self._connect_lock:
            if self._client is not None and self._endpoint is not None:
                return self._client, self._endpoint
            failures = []
            for index, (endpoint, host, port) in enumerate(self._endpoints):
                share_sec = (deadline - loop.time()) / (len(self._endpoints) - index)
                if share_sec <= 0:
                    failures.append(f"{endpoint}: not tried, deadline reached")
                    continue
                client = self._new_client(host, port)
                try:
                    # Linearizable read: answers only when this member can reach a raft leader.
                    await asyncio.wait_for(client.get(self._prefix.encode()), share_sec)
                except (TimeoutError, aetcd.ClientError, grpc.RpcError, OSError) as exc:
                    failures.append(f"{endpoint}: {_describe(exc, share_sec)}")
                    logger.warning("etcd endpoint %s unusable (%s)%s", endpoint, _describe(exc, share_sec),
                                   "; trying the next one" if index + 1 < len(self._endpoints) else "")
                    await _close_quietly(client)
                    continue
                except BaseException:
                    # Cancelled (the call's deadline): close without awaiting in a cancelled task.
                    self._close_later(client, grace_sec=None)
                    raise
                if self._closed:
                    await _close_quietly(client)
                    raise StoreError(f"etcd store closed while connecting (key {key!r})")
                self._client, self._endpoint = client, endpoint
                logger.info("runtime store connected to etcd %s (prefix %s)", endpoint, self._prefix)
                return client, endpoint
            raise StoreError(f"no etcd endpoint reachable for key {key!r}: {'; '.join(failures)}")

    def _retire_client(self, client: aetcd.Client) -> None:
        """Stops using `client` after it failed; closes it once calls still running on it are done.

        Other coroutines may be mid-call on the same channel: closing it at once would cancel their
        RPCs. They are all bounded by request_timeout_sec, so that is the grace given.
        """
        if self._client is client:
            self._client, self._endpoint = None, None
        self._close_later(client, grace_sec=self._timeout_sec)

    def _close_later(self, client: aetcd.Client, grace_sec: float | None) -> None:
        if any(c is client for c in self._retiring.values()):
            return
        task = asyncio.get_running_loop().create_task(_close_quietly(client, grace_sec=grace_sec))
        # The loop keeps only weak references to tasks: hold it until done (close() cancels it).
        self._retiring[task] = client
        task.add_done_callback(lambda t: self._retiring.pop(t, None))

    async def call(self, what: str, key: str, op: Callable[[aetcd.Client], Awaitable[T]], *,
                   write: bool) -> T:
        """Runs `op` against a connected client within the request timeout, mapping failures to
        StoreError; `what` and `key` name the call in the error, `write` marks its outcome unknown."""
        if self._closed:
            raise StoreError(f"etcd store closed ({what} of key {key!r})")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._timeout_sec
        unknown = " (outcome unknown: re-read before retrying)" if write else ""
        client: aetcd.Client | None = None
        endpoint: str | None = None

        async def run() -> T:
            nonlocal client, endpoint
            client, endpoint = await self._connect(deadline, key)
            return await op(client)

        self.in_flight += 1
        try:
            return await asyncio.wait_for(run(), self._timeout_sec)
        except StoreError:
            raise
        except TimeoutError:
            if client is not None:
                self._retire_client(client)
            if endpoint is None:
                tried = ", ".join(ep for ep, _, _ in self._endpoints)
                raise StoreError(f"{what} of key {key!r}: no etcd endpoint answered within "
                                 f"{self._timeout_sec:g}s (tried {tried})") from None
            raise StoreError(f"{what} of key {key!r} at etcd {endpoint} timed out after "
                             f"{self._timeout_sec:g}s{unknown}") from None
        except (aetcd.ClientError, grpc.RpcError, OSError) as exc:
            if client is not None:
                self._retire_client(client)
            raise StoreError(f"{what} of key {key!r} at etcd {endpoint} failed: "
                             f"{_describe(exc, self._timeout_sec)}{unknown}") from exc
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise
            # Nobody cancelled this task: grpc reports an RPC cut by its channel closing (close()
            # while the call ran) as CancelledError, which must not pass for a cancellation.
            raise StoreError(f"{what} of key {key!r} at etcd {endpoint}: connection closed during the call"
                             f"{unknown}") from None
        finally:
            self.in_flight -= 1

    async def watch_once(self, what: str, key: bytes, *, start_revision: int, wait_sec: float) -> object | None:
        """The first change of `key` at or after `start_revision` (an aetcd Event), or None when none
        came within `wait_sec`; failures are StoreError (and retire the client, as for `call`)."""
        if self._closed:
            raise StoreError(f"etcd store closed ({what} of key {key!r})")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._timeout_sec
        client: aetcd.Client | None = None
        endpoint: str | None = None
        try:
            client, endpoint = await asyncio.wait_for(self._connect(deadline, key.decode()), self._timeout_sec)
            # aetcd bounds the wait itself; the outer bound covers a watch stream that never answers.
            return await asyncio.wait_for(client.watch_once(key, timeout=wait_sec, start_revision=start_revision),
                                          wait_sec + self._timeout_sec)
        except aetcd.WatchTimeoutError:
            return None
        except StoreError:
            raise
        except TimeoutError:
            if client is not None:
                self._retire_client(client)
            raise StoreError(f"{what} of key {key!r} at etcd {endpoint or '-'}: no answer") from None
        except (aetcd.ClientError, grpc.RpcError, OSError) as exc:
            if client is not None:
                self._retire_client(client)
            raise StoreError(f"{what} of key {key!r} at etcd {endpoint}: {_describe(exc, wait_sec)}") from exc

    async def close(self) -> None:
        """Closes every connection now; calls still running fail with StoreError. Idempotent."""
        self._closed = True
        clients = list(self._retiring.values())
        for task in list(self._retiring):
            task.cancel()
        if self._client is not None:
            clients.append(self._client)
        self._client, self._endpoint = None, None
        for client in clients:
            await _close_quietly(client)


def _describe(exc: BaseException, timeout_sec: float) -> str:
    if isinstance(exc, TimeoutError):
        return f"no answer within {timeout_sec:.3g}s"
    text = str(exc).strip() or type(exc).__name__
    return f"{type(exc).__name__}: {text}" if text != type(exc).__name__ else text


async def _close_quietly(client: aetcd.Client, grace_sec: float | None = None) -> None:
    try:
        if grace_sec and client.channel is not None:
            # New calls are refused at once; running ones get up to grace_sec to finish.
            await asyncio.wait_for(client.channel.close(grace_sec), grace_sec + _CLOSE_TIMEOUT_SEC)
        await asyncio.wait_for(client.close(), _CLOSE_TIMEOUT_SEC)
    except Exception as exc:  # a broken channel must not mask the error being reported
        logger.debug("closing etcd client failed: %s", exc)
