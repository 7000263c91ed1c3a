"""What the Controller's WatchFaultToleranceStatus stream showed during a test (a background reader):
used where a value is transient, e.g. a last_error that a successful fallback clears again."""

from __future__ import annotations

import threading

import grpc

from gen.motor.v1 import controller_pb2, controller_pb2_grpc


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
