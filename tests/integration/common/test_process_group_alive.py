"""group_alive: a process group with no member is answered without reading /proc; one whose only
member is a zombie is not alive; a running member is."""

from __future__ import annotations

import subprocess
from unittest import mock

from motor.common import process
from motor.common.process import group_alive, stop_process_group


def test_a_stopped_group_is_gone_without_scanning_proc() -> None:
    popen = subprocess.Popen(["sleep", "30"], start_new_session=True)
    assert group_alive(popen.pid)
    stop_process_group(popen.pid, grace_sec=5, popen=popen)
    with mock.patch.object(process, "_group_members", side_effect=AssertionError("/proc scanned")):
        assert not group_alive(popen.pid)


def test_a_zombie_leader_does_not_keep_its_group_alive() -> None:
    popen = subprocess.Popen(["true"], start_new_session=True)
    for _ in range(500):  # the leader exits and stays a zombie until reaped
        if process._group_members(popen.pid) == []:
            break
        subprocess.run(["sleep", "0.01"], check=True)
    assert not group_alive(popen.pid)
    popen.wait()
