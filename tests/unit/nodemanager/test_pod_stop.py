"""PodStopRecord: a StopPod kept in the pod's log_dir, read back by the next NodeManager run, given
up rank by rank as the Controller starts ranks again, and ignored when it is not this pod's."""

from __future__ import annotations

import json
from pathlib import Path

from nodemanager.pod_stop import FILE_NAME, FileStopStorage, PodStopRecord


def record(tmp_path: Path, instance_id: int = 7, local_ids: tuple[int, ...] = (0, 1)) -> PodStopRecord:
    return PodStopRecord(FileStopStorage(tmp_path), instance_id=instance_id, local_ids=local_ids)


def test_a_recorded_stop_is_read_back_by_the_next_run(tmp_path: Path) -> None:
    assert record(tmp_path).load() is None
    record(tmp_path).save([1, 0], "sd-3", "every DP rank of the pod is committed dead")
    stop = record(tmp_path).load()
    assert stop is not None
    assert (stop.instance_id, stop.ranks, stop.request_id) == (7, (0, 1), "sd-3")
    assert record(tmp_path).stopped == ()  # known once loaded
    assert not (tmp_path / (FILE_NAME + ".tmp")).exists()


def test_ranks_started_again_leave_the_record_and_it_goes_when_none_is_left(tmp_path: Path) -> None:
    r = record(tmp_path)
    r.save([0, 1], "sd-3", "why")
    r.release([1])
    stop = r.load()
    assert stop is not None and stop.ranks == (0,) and r.stopped == (0,)
    r.release([5])  # not stopped: nothing changes
    assert r.load() == stop
    r.release([0])
    assert r.load() is None and not (tmp_path / FILE_NAME).exists() and r.stopped == ()


def test_a_record_that_is_not_this_pods_is_ignored(tmp_path: Path) -> None:
    record(tmp_path, instance_id=8).save([0, 1], "sd-1", "other instance")
    assert record(tmp_path).load() is None
    record(tmp_path, local_ids=(0, 1, 2)).save([2], "sd-1", "other ranks")
    assert record(tmp_path).load() is None
    (tmp_path / FILE_NAME).write_text("{not json", encoding="utf-8")
    assert record(tmp_path).load() is None
    (tmp_path / FILE_NAME).write_text(json.dumps({"instance_id": 7}), encoding="utf-8")
    assert record(tmp_path).load() is None
