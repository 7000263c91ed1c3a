"""What the services showed during a test: the Controller's WatchFaultToleranceStatus stream (a
background reader, where a value is transient, e.g. a last_error that a successful fallback clears
again), a counter of a service's /metrics now (to wait for work by count: a periodic SET, a hardware
fault taken), a transaction's decision, the timeline's strategies and calls, and a whole-instance
reconfiguration awaited and then served on every rank."""

from __future__ import annotations

import threading

import grpc
from prometheus_client.parser import text_string_to_metric_families

from gen.motor.v1 import controller_pb2, controller_pb2_grpc
from motor.testing.waits import wait_for


def counter(cluster, name: str, service: str = "controller", **labels: str) -> float:
    """Sum of the `name` samples (e.g. motor_publications_total) whose labels include `labels`."""
    return sum(s.value for f in text_string_to_metric_families(cluster.scrape(service)) for s in f.samples
               if s.name == name and set(labels.items()) <= set(s.labels.items()))


def wait_hardware_taken(cluster, level: str, at_least: int = 1, timeout_sec: float = 10.0) -> None:
    """The Controller took (and mapped to ranks) `at_least` hardware faults of `level` in all."""
    wait_for(lambda: counter(cluster, "motor_hardware_faults_total", level=level, mapped="true") >= at_least,
             timeout_sec, f"{at_least} mapped {level} hardware fault(s) taken by the Controller")


def decision(txn: dict) -> dict:
    """The DECISION event of a timeline transaction (its JSON)."""
    return next(e for e in txn["events"] if e["event_kind"] == "DECISION")


def strategies(data) -> list[tuple[str, str]]:
    """(strategy, outcome without its detail) of every transaction of the collected timeline."""
    return [(t["strategy"], t["outcome"].split(":")[0]) for t in data["controller_timeline"]]


def calls(data, name: str) -> list[dict]:
    """Every `name` call (guard, apply, ...) of every transaction of the collected timeline."""
    return [e for t in data["controller_timeline"] for e in t["events"] if e["name"] == name]


def wait_reconfigured(cluster, timeout_sec: float = 120.0) -> dict:
    """The runtime once a whole-instance reconfiguration succeeded and the instance serves again."""
    def done(rt) -> bool:
        return rt["phase"] in ("NORMAL", "DISABLED") and rt["serving_published"] and \
            any(t["strategy"] == "instance_reconfiguration" and t["outcome"] == "succeeded" for t in cluster.timeline())
    return cluster.wait_until(done, timeout_sec, "whole-instance reconfiguration")


def infer_all_ranks(cluster, artifacts) -> None:
    """Four requests after the recovery, each answered."""
    load = cluster.load_generator(concurrency=1, max_tokens=4)
    results = [load.send_one(f"after recovery {i}") for i in range(4)]
    artifacts.data["inference_after_recovery"].extend({"status": r.status, "rank": r.rank} for r in results)
    assert all(r.ok for r in results), [r.error for r in results]


class LastErrors:
    """Every distinct last_error of the instance's runtime, in order."""

    def __init__(self, cluster, instance_id: int) -> None:
        self._channel = cluster.grpc_channel(cluster.controller_address)
        self._stream = controller_pb2_grpc.ControllerStub(self._channel).WatchFaultToleranceStatus(
            controller_pb2.WatchFaultToleranceStatusRequest(instance_ids=[instance_id]))
        self.values: list[str] = []
        self._thread = threading.Thread(target=self._run, name="watch-last-error", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            for change in self._stream:
                if change.runtime.HasField("last_error") and change.runtime.last_error not in self.values:
                    self.values.append(change.runtime.last_error)
        except grpc.RpcError:
            pass  # cancelled by close()

    def close(self) -> None:
        self._stream.cancel()
        self._thread.join(5)
        self._channel.close()
