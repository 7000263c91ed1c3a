"""The NodeManager's registration check: device ids are the pod's cards (huawei.com/AscendReal), never
container-local indices (config) — against kubelet's downwardAPI annotations file format."""

from __future__ import annotations

from pathlib import Path

import pytest

from motor.common.config.loader import ConfigError, build_config
from nodemanager.config import NodeManagerConfig
from nodemanager.device_ids import (
    DeviceIdMismatch,
    check_device_ids,
    parse_downward_annotations,
    pod_cards,
    unlisted_device_ids,
)

# kubelet's fieldpath.FormatMap: sorted `key="%q value"` lines (what a downwardAPI volume holds).
ANNOTATIONS = (
    'ascend.kubectl.kubernetes.io/ascend-910-configuration="{\\"pod_name\\":\\"engine-0\\",\\"devices\\":[]}"\n'
    'huawei.com/Ascend910="Ascend910-4,Ascend910-5,Ascend910-6,Ascend910-7"\n'
    'huawei.com/AscendReal="Ascend910-4,Ascend910-5,Ascend910-6,Ascend910-7"\n'
    'huawei.com/kltDev="Ascend910-0,Ascend910-1,Ascend910-2,Ascend910-3"\n'
    'kubernetes.io/config.seen="2025-10-09T09:30:00.000000000Z"'
)


def test_downward_file_is_parsed() -> None:
    annotations, problems = parse_downward_annotations(ANNOTATIONS)
    assert problems == []
    assert annotations["huawei.com/AscendReal"] == "Ascend910-4,Ascend910-5,Ascend910-6,Ascend910-7"
    assert annotations["ascend.kubectl.kubernetes.io/ascend-910-configuration"] == '{"pod_name":"engine-0","devices":[]}'


def test_bad_lines_are_reported_good_ones_kept() -> None:
    annotations, problems = parse_downward_annotations('a="1"\nno equals\nb=unquoted\nc="\\x"\n\nd="2"')
    assert annotations == {"a": "1", "d": "2"}
    assert len(problems) == 3
    assert "line 2" in problems[0] and "line 3" in problems[1] and "line 4: value of 'c'" in problems[2]


@pytest.mark.parametrize(
    ("annotations", "used", "cards"),
    [
        ({"huawei.com/AscendReal": "npu-0,npu-1", "huawei.com/npu": "npu-2,npu-3"}, "huawei.com/AscendReal",
         {"npu-0", "npu-1"}),
        # Volcano's allocation before the device plugin corrected the annotations.
        ({"huawei.com/Ascend910": "Ascend910-2,Ascend910-3", "huawei.com/kltDev": "Ascend910-0"}, "huawei.com/Ascend910",
         {"Ascend910-2", "Ascend910-3"}),
        ({"huawei.com/npu": "npu-1"}, "huawei.com/npu", {"npu-1"}),
        # An operator's DevicePublicType; kubelet's own names are never taken for the real cards.
        ({"huawei.com/kltDev": "Ascend910-0", "huawei.com/MyAccel910": "custom910-1"}, "huawei.com/MyAccel910",
         {"custom910-1"}),
        ({"huawei.com/kltDev": "Ascend910-0"}, "", set()),
        ({"huawei.com/AscendReal": "", "other": "x"}, "", set()),
    ],
)
def test_pod_cards(annotations: dict[str, str], used: str, cards: set[str]) -> None:
    assert pod_cards(annotations) == (used, frozenset(cards))


def test_unlisted_ids() -> None:
    annotations, _ = parse_downward_annotations(ANNOTATIONS)
    assert unlisted_device_ids(["Ascend910-4", "Ascend910-5"], annotations)[0] == []
    # Container view (kubelet's kltDev names, or the first cards of the host) is not the pod's real cards.
    assert unlisted_device_ids(["Ascend910-0", "Ascend910-4"], annotations)[0] == ["Ascend910-0"]


def test_check_reads_the_file(tmp_path: Path) -> None:
    path = tmp_path / "annotations"
    path.write_text(ANNOTATIONS)
    assert "are cards of this pod (huawei.com/AscendReal)" in check_device_ids(str(path), ["Ascend910-4"])
    with pytest.raises(DeviceIdMismatch, match=r"device ids \['Ascend910-1'\] are not cards of this pod: "
                                                r"huawei.com/AscendReal='Ascend910-4,Ascend910-5"):
        check_device_ids(str(path), ["Ascend910-1", "Ascend910-5"])
    path.write_text('kubernetes.io/config.seen="now"')
    with pytest.raises(DeviceIdMismatch, match="no huawei.com/AscendReal or huawei.com/<resource> card list yet"):
        check_device_ids(str(path), ["Ascend910-4"])
    with pytest.raises(DeviceIdMismatch, match="unreadable"):
        check_device_ids(str(tmp_path / "missing"), ["Ascend910-4"])
    assert "not checked" in check_device_ids(None, ["Ascend910-4"])


@pytest.mark.parametrize("device_id", ["0", "7", "davinci0", "/dev/davinci3", "", " Ascend910-1", "Ascend910-1,Ascend910-2"])
def test_container_indices_and_lists_are_refused_by_the_config(device_id: str) -> None:
    with pytest.raises(ConfigError, match=r"engines\.0\.device_infos\.0\.device_id"):
        build_config(NodeManagerConfig, {"controller_address": "127.0.0.1:1", "instance_id": 1, "dp_size": 1,
                                         "engines": [{"dp_rank": 0, "device_infos": [{"device_id": device_id}]}]})


@pytest.mark.parametrize("device_id", ["Ascend910-3", "npu-3", "Ascend910-2c-100-0_1", "custom910-3"])
def test_card_names_are_taken(device_id: str) -> None:
    cfg = build_config(NodeManagerConfig, {"controller_address": "127.0.0.1:1", "instance_id": 1, "dp_size": 1,
                                           "pod_annotations_file": "/etc/podinfo/annotations",
                                           "engines": [{"dp_rank": 0, "device_infos": [{"device_id": device_id}]}]})
    assert cfg.engines[0].device_infos[0].device_id == device_id
    assert cfg.pod_annotations_file == "/etc/podinfo/annotations"
