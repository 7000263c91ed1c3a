"""Leader election of Controller replicas on one etcd (etcd's own election recipe, one key).

Campaign: while the leader key `{key_prefix}/leader` is absent, a replica grants itself a lease of
`lease_ttl_sec` and runs one transaction "if the key has version 0, put it (value: this replica's
id and address) on my lease, and read it back": the one whose transaction succeeds leads, and the
revision that created the key is its fencing term. Observe: every other replica reads who leads
from the key and watches it (each wait bounded, so a broken watch degrades to polling) until it is
deleted, which etcd does when the leader's lease expires or the leader resigns.

Lead: the leader refreshes its lease every third of the TTL and checks the key is still its own;
each answered refresh moves the fence's deadline to (send time + TTL − margin), which ends before
etcd could expire the lease. The leadership is lost, for good, when a refresh says the lease is
gone, the key names another term, or no refresh was answered before the deadline (etcd down or
this process frozen); `on_deposed` then runs (the Controller stops acting) and only after it has
returned does the replica campaign again, so no task of the old term is left when a new one starts.
A graceful stop resigns (revokes the lease), so a standby takes over at once.

Every etcd call is bounded by the store's request timeout (`EtcdConnection`); every loop iteration
is bounded in time, and a failed iteration waits a short, bounded backoff (tenacity, for the campaign).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import aetcd
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception_type, wait_fixed

from motor.controller.fencing import Fence, Leadership
from motor.controller.persistence.errors import StoreError
from motor.controller.persistence.etcd_connection import EtcdConnection

log = logging.getLogger(__name__)
# How many times close() asks the election loop to stop before it gives up waiting for it.
CANCEL_ATTEMPTS = 5

# A leader's own deadline ends this much before the lease's (at most a tenth of the TTL).
_MARGIN_SEC = 0.5
# One observe wait; an event ends it sooner.
_OBSERVE_WAIT_SEC = 1.0


@dataclass(frozen=True)
class ReplicaIdentity:
    replica_id: str
    address: str

    def encode(self) -> bytes:
        return json.dumps({"replica_id": self.replica_id, "address": self.address,
                           "since_unix_sec": round(time.time(), 3)}, sort_keys=True).encode()

    @classmethod
    def decode(cls, value: bytes) -> ReplicaIdentity:
        try:
            doc = json.loads(value.decode("utf-8"))
            return cls(str(doc["replica_id"]), str(doc["address"]))
        except (ValueError, KeyError, TypeError, UnicodeDecodeError):
            return cls(f"<unreadable leader key {value[:40]!r}>", "")


class LeaderElection:
    def __init__(
        self,
        conn: EtcdConnection,
        key: str,
        ttl_sec: int,
        me: ReplicaIdentity,
        leadership: Leadership,
        on_elected: Callable[[Fence], None],
        on_deposed: Callable[[str], Awaitable[None]],
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._conn = conn
        self.key = key.encode()
        self.ttl_sec = ttl_sec
        self.me = me
        self._leadership = leadership
        self._on_elected = on_elected
        self._on_deposed = on_deposed
        self._clock = clock
        self._margin = min(_MARGIN_SEC, ttl_sec / 10)
        self._renew_every = ttl_sec / 3
        self._backoff = min(1.0, ttl_sec / 4)
        self._task: asyncio.Task[None] | None = None
        self._fence: Fence | None = None
        # Leases this replica granted and may still hold (revoked when seen again after a loss).
        self._own_leases: set[int] = set()
        self._failing = False
        self.terms_won = 0
        self.first_round = asyncio.Event()

    # ---- lifecycle -----------------------------------------------------------------------------

    async def start(self) -> None:
        """Starts campaigning; returns once the first round has ended (won, or someone else leads)."""
        self._task = asyncio.create_task(self._run(), name="leader-election")
        waiter = asyncio.create_task(self.first_round.wait())
        try:
            done, _ = await asyncio.wait({self._task, waiter}, timeout=self._conn.timeout_sec * 2 + 1,
                                         return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiter.cancel()
        if self._task in done:
            self._task.result()  # a crash of the loop is a bug: surface it

    async def close(self, resign: bool = True) -> None:
        """Stops campaigning; resigns (revokes the lease) when leading, so a standby takes over at once."""
        if self._task is not None:
            task, self._task = self._task, None
            for _ in range(CANCEL_ATTEMPTS):
                task.cancel()
                # Python 3.11's asyncio.wait_for loses a cancellation that arrives as the call it
                # waits for ends (an etcd call failing at that moment): then the loop goes on
                # campaigning, and is asked again.
                done, _ = await asyncio.wait({task}, timeout=self._conn.timeout_sec)
                if done:
                    break
            else:
                log.error("replica %s: the election loop did not stop after %d cancellations", self.me.replica_id,
                          CANCEL_ATTEMPTS)
            if task.done() and not task.cancelled() and task.exception() is not None:
                log.warning("replica %s: the election loop had failed: %r", self.me.replica_id, task.exception())
        fence = self._fence
        if fence is not None:
            fence.lose("resigned: the replica is stopping")
            self._fence = None
        if resign:
            for lease_id in list(self._own_leases):
                await self._revoke(lease_id)

    # ---- the loop ------------------------------------------------------------------------------

    async def _run(self) -> None:
        while True:
            lost = asyncio.Event()
            fence = await self._campaign(lambda reason, lost=lost: lost.set())
            self._fence = fence
            self.terms_won += 1
            self._leadership.adopt(fence)
            self._leadership.set_leader(self.me.replica_id, self.me.address, fence.term)
            log.warning("replica %s leads: term %d, lease %x (ttl %ds)", self.me.replica_id, fence.term,
                        fence.lease_id, self.ttl_sec)
            self.first_round.set()
            self._on_elected(fence)
            reason = await self._lead(fence, lost)
            self._fence = None
            self._leadership.set_leader("", "", 0)
            await self._on_deposed(reason)
            await self._revoke(fence.lease_id)

    async def _campaign(self, on_lost: Callable[[str], None]) -> Fence:
        """Returns once this replica won, with a fence that calls `on_lost` when it is lost. Each
        iteration is bounded (one read, maybe one transaction, one bounded observe wait); etcd
        failing, it is tried again after the fixed backoff for as long as the replica runs
        (cancelling the election ends the wait)."""
        retrying = AsyncRetrying(retry=retry_if_exception_type(StoreError), wait=wait_fixed(self._backoff),
                                 before_sleep=self._campaign_failed, reraise=True)
        while True:
            fence = await retrying(self._campaign_once, on_lost)
            self._ok()
            if fence is not None:
                return fence

    def _campaign_failed(self, state: RetryCallState) -> None:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise asyncio.CancelledError  # asked to stop while the failed call ended: no retry
        if state.outcome is not None:
            self._failed("campaign", state.outcome.exception())

    async def _campaign_once(self, on_lost: Callable[[str], None]) -> Fence | None:
        kv = await self._read_key()
        if kv is not None and kv.lease in self._own_leases:
            # Our own key of a term we already gave up (etcd was unreachable when we revoked it).
            await self._revoke(kv.lease)
            return None
        if kv is None:
            fence = await self._try_to_win(on_lost)
            if fence is not None:
                return fence
            kv = await self._read_key()
            if kv is None:
                return None
        leader = ReplicaIdentity.decode(kv.value)
        self._leadership.set_leader(leader.replica_id, leader.address, kv.create_revision)
        self.first_round.set()
        # Observe: wait for the key to change (deleted when the leader's lease ends), bounded.
        await self._conn.watch_once("observe leader", self.key, start_revision=kv.mod_revision + 1,
                                    wait_sec=min(_OBSERVE_WAIT_SEC, self.ttl_sec / 2))
        return None

    async def _try_to_win(self, on_lost: Callable[[str], None]) -> Fence | None:
        sent = self._clock()

        async def grant(client: aetcd.Client) -> Any:
            return await client.lease(self.ttl_sec)

        lease = await self._conn.call("grant leader lease", self.key.decode(), grant, write=True)
        self._own_leases.add(lease.id)
        key, value = self.key, self.me.encode()

        async def txn(client: aetcd.Client) -> tuple[bool, list[Any]]:
            tx = client.transactions
            return await client.transaction(compare=[tx.version(key) == 0],
                                            success=[tx.put(key, value, lease=lease.id), tx.get(key)],
                                            failure=[tx.get(key)])

        try:
            won, responses = await self._conn.call("campaign", key.decode(), txn, write=True)
        except StoreError:
            await self._revoke(lease.id)
            raise
        if not won:
            await self._revoke(lease.id)
            return None
        kv = responses[1][0][1]
        deadline = sent + lease.ttl - self._margin
        return Fence(kv.create_revision, key, deadline, clock=self._clock, lease_id=lease.id, on_lost=on_lost)

    async def _lead(self, fence: Fence, lost: asyncio.Event) -> str:
        """Keeps the lease alive until the leadership is lost; returns why it was."""
        while fence.leading:
            sent = self._clock()
            try:
                # Bounded by the fence too: a refresh still unanswered at the deadline is a loss now.
                # (asyncio.timeout, not wait_for: on 3.11 wait_for drops a cancellation that lands as
                # the refresh completes, and close() would then wait for a loop that never ends.)
                async with asyncio.timeout(max(0.05, fence.deadline - self._clock())):
                    ttl, kv = await self._refresh_and_read(fence)
            except TimeoutError:
                fence.lose(f"no keepalive of lease {fence.lease_id:x} answered before the deadline")
                break
            except StoreError as exc:
                self._failed("keepalive", exc)
                if not fence.leading:
                    break
                await self._wait(lost, min(self._backoff, max(0.05, fence.deadline - self._clock())))
                continue
            self._ok()
            if ttl <= 0:
                fence.lose(f"etcd says lease {fence.lease_id:x} expired")
                break
            if kv is None or kv.create_revision != fence.term or kv.lease != fence.lease_id:
                fence.lose(f"leader key {self.key.decode()!r} is no longer term {fence.term}'s "
                           f"({'deleted' if kv is None else f'created at revision {kv.create_revision}'})")
                break
            fence.extend(sent + ttl - self._margin)
            await self._wait(lost, max(0.0, sent + self._renew_every - self._clock()))
        return fence.lost_reason or "lost"

    async def _wait(self, lost: asyncio.Event, sec: float) -> None:
        try:
            async with asyncio.timeout(sec):
                await lost.wait()
        except TimeoutError:
            pass

    # ---- etcd calls ----------------------------------------------------------------------------

    async def _read_key(self) -> Any:
        key = self.key

        async def get(client: aetcd.Client) -> Any:
            return await client.get(key)

        return await self._conn.call("read leader key", key.decode(), get, write=False)

    async def _refresh_and_read(self, fence: Fence) -> tuple[int, Any]:
        return await self._refresh(fence), await self._read_key()

    async def _refresh(self, fence: Fence) -> int:
        async def keepalive(client: aetcd.Client) -> Any:
            return await client.refresh_lease(fence.lease_id)

        reply = await self._conn.call("keep the leader lease alive", self.key.decode(), keepalive, write=False)
        return int(reply.TTL) if reply is not None else 0

    async def _revoke(self, lease_id: int) -> None:
        """Best effort: a lease not revoked expires on its own within the TTL."""
        async def revoke(client: aetcd.Client) -> Any:
            return await client.revoke_lease(lease_id)

        try:
            await self._conn.call("revoke leader lease", self.key.decode(), revoke, write=True)
        except StoreError as exc:
            if "not found" in str(exc):
                self._own_leases.discard(lease_id)
            else:
                log.info("revoking lease %x failed (it expires within %ds): %s", lease_id, self.ttl_sec, exc)
                return
        self._own_leases.discard(lease_id)

    def _failed(self, what: str, exc: BaseException) -> None:
        if not self._failing:
            log.warning("leader election: %s failed (logged once per outage): %s", what, exc)
        self._failing = True

    def _ok(self) -> None:
        if self._failing:
            log.info("leader election: etcd answers again")
        self._failing = False
