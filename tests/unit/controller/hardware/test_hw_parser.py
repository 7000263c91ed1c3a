"""Device-info ConfigMap and Node parsing: documents built from MindCluster's Go structures (today's
and 2023's), and every malformed piece reported (named) and skipped while the rest is kept."""

from __future__ import annotations

import json

import pytest
import yaml

from motor.controller.hardware import levels
from motor.controller.hardware.checkcode import device_info_check_code
from motor.controller.hardware.formats import document_kind, node_from_configmap_name
from motor.controller.hardware.node_parser import parse_node
from motor.controller.hardware.parser import parse_configmap

from .hw_samples import (
    A5_CARDS,
    CUSTOM_CARDS,
    DEVICE_INFO_CFG,
    FAULT_LIST_TEXT,
    FAULTS,
    HOT_RESET,
    HOT_RESET_2023,
    NODE,
    NODE_READY,
    configmap_object,
    device_info_cfg,
    device_info_cfg_2023,
    device_info_text,
    device_list,
    fault,
    fault_2023,
    full_data,
    node_not_ready,
    normal,
)


def _by_card(faults):
    return {(f.npu_name, f.fault_codes): f for f in faults}


def test_real_format_sample_parses_every_entry() -> None:
    faults, problems = parse_configmap(configmap_object(NODE, full_data()))
    assert problems == []
    got = _by_card(faults)
    assert set(got) == {
        ("Ascend910-1", ("80CB8002",)),
        ("Ascend910-2", ("80E18402", "A8028801")),
        ("Ascend910-5", ("80CB8002",)),
        ("Ascend910-6", ("81078603",)),
        ("Ascend910-7", ("80E21007",)),
    }
    lost = got[("Ascend910-2", ("80E18402", "A8028801"))]
    assert (lost.node_name, lost.level, lost.fault_handling, lost.fault_type) == (NODE, levels.L6, "SeparateNPU", "CardUnhealthy")
    # The latest per-code time, in seconds.
    assert lost.fault_time_unix_sec == pytest.approx(1760000000.456)
    assert lost.source == "configmap"
    assert got[("Ascend910-1", ("80CB8002",))].level == levels.L5
    assert got[("Ascend910-6", ("81078603",))].level == levels.L1  # PreSeparateNPU
    assert got[("Ascend910-6", ("81078603",))].fault_handling == "PreSeparateNPU"
    assert got[("Ascend910-7", ("80E21007",))].level == levels.L1


def test_same_code_on_two_cards_stays_two_faults() -> None:
    faults, _ = parse_configmap(DEVICE_INFO_CFG, node_name=NODE)
    same = [f for f in faults if f.fault_codes == ("80CB8002",)]
    assert sorted(f.npu_name for f in same) == ["Ascend910-1", "Ascend910-5"]
    assert len({f.key for f in same}) == 2


@pytest.mark.parametrize(
    "doc",
    [
        pytest.param(lambda: configmap_object(NODE, full_data()), id="k8s-object"),
        pytest.param(lambda: full_data(), id="data-mapping"),
        pytest.param(lambda: DEVICE_INFO_CFG, id="mounted-key-file-text"),
        pytest.param(lambda: DEVICE_INFO_CFG.encode(), id="mounted-key-file-bytes"),
        pytest.param(lambda: json.loads(DEVICE_INFO_CFG), id="decoded-device-info-cfg"),
        pytest.param(lambda: json.dumps(configmap_object(NODE, full_data())), id="kubectl-json-dump"),
        pytest.param(lambda: yaml.safe_dump(configmap_object(NODE, full_data())), id="kubectl-yaml-dump"),
    ],
)
def test_every_document_shape_gives_the_same_faults(doc) -> None:
    reference, _ = parse_configmap(configmap_object(NODE, full_data()))
    faults, problems = parse_configmap(doc(), node_name=NODE)
    assert problems == []
    assert [f.key for f in faults] == [f.key for f in reference]


def test_check_code_is_go_compatible() -> None:
    # The sample's CheckCode is sha256 of the DeviceInfo text as written (as Go marshals it).
    for text in (DEVICE_INFO_CFG, device_info_cfg(device_info_text(HOT_RESET)), device_info_cfg(device_info_text(A5_CARDS))):
        assert device_info_check_code(json.loads(text)["DeviceInfo"]) == json.loads(text)["CheckCode"]


def test_check_code_escapes_html_characters_like_go() -> None:
    info_text = '{"DeviceList":{"k":"a\\u003cb\\u003e\\u0026c"},"UpdateTime":5}'
    import hashlib

    assert device_info_check_code(json.loads(info_text)) == hashlib.sha256(info_text.encode()).hexdigest()


def test_check_code_mismatch_is_reported_but_entries_kept() -> None:
    tampered = device_info_cfg(device_info_text(), check_code="0" * 64)
    faults, problems = parse_configmap(tampered, node_name=NODE)
    assert len(faults) == 5
    assert len(problems) == 1 and "CheckCode" in problems[0] and "still used" in problems[0]


def test_2023_format_is_read() -> None:
    # v5.0.0: {DeviceInfo, CheckCode}, entries without fault_handling and times, no -Recovering.
    entries = [fault_2023(f["npu_name"], f["fault_level"], f["fault_code"].split(","), f["fault_type"]) for f in FAULTS]
    listed = device_list(faults=entries, available="Ascend910-0,Ascend910-3,Ascend910-4,Ascend910-7",
                         unhealthy="Ascend910-1,Ascend910-2,Ascend910-5", network="Ascend910-6", recovering=None)
    faults, problems = parse_configmap({"DeviceInfoCfg": device_info_cfg_2023(device_info_text(listed)),
                                        "ManuallySeparateNPU": ""}, node_name=NODE)
    assert problems == []
    today, _ = parse_configmap(DEVICE_INFO_CFG, node_name=NODE)
    assert [(f.key, f.level, f.fault_handling) for f in faults] == [(f.key, f.level, f.fault_handling) for f in today]
    assert all(f.fault_time_unix_sec == 0.0 for f in faults)  # 2023 wrote no fault times


def test_a5_rack_id_document_is_read_and_its_check_code_is_over_device_info() -> None:
    text = device_info_cfg(device_info_text(A5_CARDS), super_pod_id=1, server_index=4, rack_id=0)
    assert '"RackID":0}' in text
    faults, problems = parse_configmap(text, node_name=NODE)
    assert problems == []
    assert [(f.npu_name, f.level, f.fault_handling) for f in faults] == [("npu-1", levels.L6, "SeparateNPU")]


def test_operator_resource_names_are_read() -> None:
    faults, problems = parse_configmap(device_info_cfg(device_info_text(CUSTOM_CARDS)), node_name=NODE)
    assert problems == []
    assert [(f.npu_name, f.level) for f in faults] == [("custom910-3", levels.L5)]


def test_hot_reset_ring_mates_are_evidence_not_noise() -> None:
    # Today: the ring-mates' NormalNPU/NormalNetwork entries (empty fault_code) are no fault of their
    # own, not a problem; the -Recovering list makes each a card under reset (L5).
    faults, problems = parse_configmap(device_info_cfg(device_info_text(HOT_RESET)), node_name=NODE)
    assert problems == []
    got = {f.npu_name: (f.fault_codes, f.level, f.fault_type) for f in faults}
    assert got == {
        "Ascend910-0": ((), levels.L5, "CardRecovering"),
        "Ascend910-1": (("80CB8002",), levels.L5, "CardUnhealthy"),  # its own entry covers its reset
        "Ascend910-2": ((), levels.L5, "CardRecovering"),
        "Ascend910-3": ((), levels.L5, "CardRecovering"),
    }
    assert all(f.fault_time_unix_sec == 0.0 for f in faults if f.fault_type == "CardRecovering")


def test_hot_reset_in_the_2023_format() -> None:
    # 2023: no entry and no -Recovering for the ring-mates; -Unhealthy says they are withdrawn.
    faults, problems = parse_configmap(device_info_cfg_2023(device_info_text(HOT_RESET_2023)), node_name=NODE)
    assert problems == []
    got = {f.npu_name: (f.level, f.fault_type) for f in faults}
    assert got == {"Ascend910-0": (levels.L5, "CardWithdrawn"), "Ascend910-1": (levels.L5, "CardUnhealthy"),
                   "Ascend910-2": (levels.L5, "CardWithdrawn"), "Ascend910-3": (levels.L5, "CardWithdrawn")}


def test_card_lists_only_add_what_entries_do_not_say() -> None:
    listed = device_list(faults=[fault("Ascend910-4", "NotHandleFault", ["80E21007"]), normal("Ascend910-5", True)],
                         unhealthy="", network="Ascend910-5,Ascend910-6", recovering="Ascend910-4")
    faults, problems = parse_configmap(device_info_cfg(device_info_text(listed)), node_name=NODE)
    assert problems == []
    got = {(f.npu_name, f.fault_type): f.level for f in faults}
    assert got == {
        ("Ascend910-4", "CardUnhealthy"): levels.L1,       # its entry (NotHandleFault)…
        ("Ascend910-4", "CardRecovering"): levels.L5,      # …is less than its reset
        ("Ascend910-5", "CardNetworkListed"): levels.L1,   # NormalNetwork entry, listed network-unhealthy
        ("Ascend910-6", "CardNetworkListed"): levels.L1,   # listed without any entry (PreSeparateNPU default)
    }


def test_only_normal_entries_mean_no_fault() -> None:
    listed = device_list(faults=[normal("Ascend910-0", True), normal("Ascend910-0", False)], available="Ascend910-0")
    assert parse_configmap(device_info_cfg(device_info_text(listed)), node_name=NODE) == ([], [])


def test_volcano_node_entry_is_not_a_device_plugin_entry() -> None:
    volcano = {"fault_type": "NodeUnhealthy", "npu_name": "", "large_model_fault_level": "SeparateNPU",
               "fault_level": "SeparateNPU", "fault_handling": "SeparateNPU", "fault_code": "heartbeatTimeOut"}
    listed = device_list(faults=[volcano, fault("Ascend910-3", "RestartNPU", ["80CB8002"])], unhealthy="Ascend910-3")
    faults, problems = parse_configmap(device_info_cfg(device_info_text(listed)), node_name=NODE)
    assert [f.npu_name for f in faults] == ["Ascend910-3"]
    assert len(problems) == 1 and "Volcano's node entry" in problems[0] and "fault_type='NodeUnhealthy'" in problems[0]


def test_card_list_that_is_not_a_string_is_reported() -> None:
    info = '{"DeviceList":{"huawei.com/Ascend910-Fault":"[]","huawei.com/Ascend910-Recovering":["Ascend910-1"]},"UpdateTime":1}'
    faults, problems = parse_configmap(device_info_cfg(info, check_code=""), node_name=NODE)
    assert faults == []
    assert len(problems) == 1 and '["huawei.com/Ascend910-Recovering"]=[\'Ascend910-1\']' in problems[0]


def test_manually_separated_cards_with_upgrade_reason() -> None:
    data = full_data()
    data["ManuallySeparateNPU"] = "Ascend910-3, Ascend910-4"
    data["UpgradeFaultReason"] = json.dumps(
        {"Ascend910-3": [{"upgrade_time": 1760000300000, "fault_code": "80CB8002", "fault_level": "ManuallySeparateNPU",
                          "upgrade_type": "FaultFrequency"}]}
    )
    faults, problems = parse_configmap(data, node_name=NODE)
    assert problems == []
    manual = {f.npu_name: f for f in faults if f.fault_type == "ManuallySeparateNPU"}
    assert set(manual) == {"Ascend910-3", "Ascend910-4"}
    assert manual["Ascend910-3"].fault_codes == ("80CB8002",)
    assert manual["Ascend910-4"].fault_codes == ()
    assert all(f.level == levels.L6 for f in manual.values())


def test_other_resource_names_are_read() -> None:
    # A5 publishes huawei.com/npu-Fault; the card name format is the resolver's business.
    faults, problems = parse_configmap(device_info_cfg(device_info_text(A5_CARDS)), node_name=NODE)
    assert problems == []
    assert [(f.npu_name, f.level) for f in faults] == [("npu-1", levels.L6)]


def test_empty_fault_list_means_no_faults() -> None:
    text = device_info_cfg(device_info_text(device_list(faults=[], available="Ascend910-0,Ascend910-1")))
    assert parse_configmap(text, node_name=NODE) == ([], [])


# --- malformed documents: reported with what was wrong, the rest kept ----------------------


@pytest.mark.parametrize(
    ("doc", "needle"),
    [
        ('{"DeviceInfo":{"DeviceList":{"huawei.com/Asc', "not JSON"),
        ("[1, 2]", "expected a ConfigMap"),
        ('{"SuperPodID":-2}', "no DeviceInfoCfg key"),
        ({"DeviceInfoCfg": '{"SuperPodID":-2,"CheckCode":""}'}, "DeviceInfo is missing"),
        ({"DeviceInfoCfg": '{"DeviceInfo":{"UpdateTime":1}}'}, "DeviceList is missing"),
        ({"DeviceInfoCfg": '{"DeviceInfo":{"DeviceList":[],"UpdateTime":1}}'}, "DeviceList is missing or not an object"),
        ({"DeviceInfoCfg": "[]"}, "not an object"),
        ({"DeviceInfoCfg": '{"DeviceInfo"'}, "DeviceInfoCfg is not JSON"),
        (b"\xff\xfe", "not UTF-8"),
    ],
)
def test_unusable_documents_are_reported(doc, needle) -> None:
    faults, problems = parse_configmap(doc, node_name=NODE)
    assert faults == []
    assert len(problems) == 1 and needle in problems[0], problems


def test_k8s_object_without_node_name_is_reported() -> None:
    obj = configmap_object(NODE, full_data())
    obj["metadata"]["name"] = "some-other-configmap"
    faults, problems = parse_configmap(obj)
    assert faults == [] and "no node name" in problems[0]


def test_k8s_object_with_non_mapping_data_is_reported() -> None:
    obj = configmap_object(NODE, {})
    obj["data"] = ["DeviceInfoCfg"]
    faults, problems = parse_configmap(obj)
    assert faults == [] and "data is list" in problems[0]


def _entry(**overrides):
    entry = {
        "fault_type": "CardUnhealthy", "npu_name": "Ascend910-3", "large_model_fault_level": "RestartNPU",
        "fault_level": "RestartNPU", "fault_handling": "RestartNPU", "fault_code": "80CB8002",
        "fault_time_and_level_map": {"80CB8002": {"fault_time": 1760000500000, "fault_level": "RestartNPU"}},
    }
    entry.update(overrides)
    return {k: v for k, v in entry.items() if v is not _DROP}


_DROP = object()


def _doc_with(entries) -> str:
    return device_info_cfg(device_info_text(device_list(faults=json.dumps(entries, separators=(",", ":")))), check_code="")


def test_bad_entries_are_skipped_and_named_good_ones_kept() -> None:
    good = _entry()
    entries = [
        "Ascend910-0",                                                    # not an object
        _entry(npu_name=4),                                               # npu_name not a string
        _entry(npu_name="Ascend910-1", fault_handling="ExplodeNPU"),      # unknown level name
        _entry(npu_name=""),                                              # no card
        _entry(npu_name="Ascend910-4", fault_code=["80CB8002"]),          # code not a string
        _entry(npu_name="Ascend910-5", fault_type=7),                     # fault_type not a string
        _entry(npu_name="Ascend910-6", fault_handling="", fault_level="", large_model_fault_level="",
               fault_time_and_level_map={}),                              # no level anywhere
        _entry(npu_name="Ascend910-7", fault_level=3, fault_handling=""),  # level not a string
        good,
    ]
    faults, problems = parse_configmap(_doc_with(entries), node_name=NODE)
    assert [(f.npu_name, f.fault_codes, f.level) for f in faults] == [("Ascend910-3", ("80CB8002",), levels.L5)]
    assert len(problems) == 8, problems
    where = '["huawei.com/Ascend910-Fault"]'
    assert f"{where}[0] is str, not an object" in problems[0]
    assert "npu_name=4 is not a string" in problems[1]
    assert "npu_name='Ascend910-1'" in problems[2] and "fault_handling='ExplodeNPU' is not a known MindCluster level" in problems[2]
    assert f"{where}[3]: npu_name=''" in problems[3] and "names a card in every entry" in problems[3]
    assert "fault_code=['80CB8002'] is not a comma-joined string" in problems[4]
    assert "fault_type=7" in problems[5]
    assert "Ascend910-6" in problems[6] and "no fault_handling/fault_level/large_model_fault_level" in problems[6]
    assert "fault_level=3 is not a string" in problems[7]
    assert all("skipped" in p for p in problems)


def test_an_entry_without_any_code_keeps_its_level() -> None:
    # The plugin writes fault_code "" when a card's level comes from its frequency/duration rules only.
    faults, problems = parse_configmap(_doc_with([_entry(fault_code="", fault_time_and_level_map={})]), node_name=NODE)
    assert problems == []
    assert [(f.npu_name, f.fault_codes, f.level) for f in faults] == [("Ascend910-3", (), levels.L5)]


def test_partly_bad_codes_keep_the_good_ones() -> None:
    faults, problems = parse_configmap(_doc_with([_entry(fault_code=" 80cb8002 ,8O;X,, 0x80e18402")]), node_name=NODE)
    assert faults[0].fault_codes == ("80CB8002", "80E18402")
    assert len(problems) == 1 and "'8O;X'" in problems[0]


def test_bad_time_map_items_are_dropped_entry_kept() -> None:
    entry = _entry(
        fault_code="80CB8002,80E18402",
        fault_time_and_level_map={
            "80CB8002": {"fault_time": "yesterday", "fault_level": "RestartNPU"},
            "80E18402": {"fault_time": 1760000600000, "fault_level": "SeparateNPU"},
            "bad key!": {"fault_time": 1, "fault_level": "RestartNPU"},
            "80C98009": "not an object",
        },
    )
    faults, problems = parse_configmap(_doc_with([entry]), node_name=NODE)
    assert [f.fault_time_unix_sec for f in faults] == [1760000600.0]
    assert len(problems) == 3
    assert "fault_time='yesterday'" in problems[0]
    assert "'bad key!'" in problems[1] and "'80C98009'" in problems[2]


def test_level_from_time_map_when_entry_levels_empty() -> None:
    entry = _entry(
        fault_handling="", fault_level="", large_model_fault_level="", fault_code="80CB8002,80E18402",
        fault_time_and_level_map={
            "80CB8002": {"fault_time": 1760000000000, "fault_level": "RestartNPU"},
            "80E18402": {"fault_time": 1760000000000, "fault_level": "SeparateNPU"},
        },
    )
    faults, problems = parse_configmap(_doc_with([entry]), node_name=NODE)
    assert problems == [] and faults[0].level == levels.L6 and faults[0].fault_handling == ""


def test_codes_from_time_map_when_fault_code_empty() -> None:
    faults, problems = parse_configmap(_doc_with([_entry(fault_code="")]), node_name=NODE)
    assert problems == [] and faults[0].fault_codes == ("80CB8002",)


def test_fault_handling_wins_over_other_level_fields() -> None:
    entry = _entry(fault_handling="SeparateNPU", fault_level="RestartNPU", large_model_fault_level="NotHandleFault")
    faults, _ = parse_configmap(_doc_with([entry]), node_name=NODE)
    assert faults[0].level == levels.L6


def test_healthy_entries_are_skipped_quietly() -> None:
    assert parse_configmap(_doc_with([_entry(fault_handling="NormalNPU")]), node_name=NODE) == ([], [])


def test_no_time_map_means_time_zero_not_update_time() -> None:
    faults, problems = parse_configmap(_doc_with([_entry(fault_time_and_level_map=_DROP)]), node_name=NODE)
    assert problems == [] and faults[0].fault_time_unix_sec == 0.0


def test_one_bad_fault_list_does_not_hide_another() -> None:
    info = (
        '{"DeviceList":{"huawei.com/Ascend310P-Fault":"[{\\"fault_type\\":","huawei.com/Ascend910-Fault":'
        + json.dumps(FAULT_LIST_TEXT) + ',"huawei.com/npu-Fault":"{}"},"UpdateTime":-4}'
    )
    faults, problems = parse_configmap(device_info_cfg(info), node_name=NODE)
    assert len(faults) == 5
    assert len(problems) == 3, problems
    assert "UpdateTime=-4" in problems[0]
    assert '"huawei.com/Ascend310P-Fault"' in problems[1] and "not a JSON array" in problems[1]
    assert '"huawei.com/npu-Fault"' in problems[2] and "not a list of faults" in problems[2]


def test_malformed_manual_separation_keys() -> None:
    data = {"DeviceInfoCfg": DEVICE_INFO_CFG, "ManuallySeparateNPU": 3, "UpgradeFaultReason": "{"}
    faults, problems = parse_configmap(data, node_name=NODE)
    assert len(faults) == 5
    assert len(problems) == 2
    assert "UpgradeFaultReason is not JSON" in problems[0]
    assert "ManuallySeparateNPU=3" in problems[1]


def test_duplicate_identity_keeps_the_worse() -> None:
    entries = [_entry(), _entry(fault_handling="SeparateNPU")]
    faults, _ = parse_configmap(_doc_with(entries), node_name=NODE)
    assert len(faults) == 1 and faults[0].level == levels.L6


def test_configmap_name_to_node() -> None:
    assert node_from_configmap_name("mindx-dl-deviceinfo-worker-7") == "worker-7"
    assert node_from_configmap_name("mindx-dl-deviceinfo-") is None
    assert node_from_configmap_name("mindx-dl-nodeinfo-worker-7") is None
    assert document_kind("mindx-dl-deviceinfo-worker-7") == ("deviceinfo", "worker-7")
    assert document_kind("mindx-dl-nodeinfo-worker-7") == ("nodeinfo", "worker-7")
    assert document_kind("mindx-dl-nodeinfo-") is None and document_kind("vcjob-fault-npu-cm") is None


# --- Node NotReady -------------------------------------------------------------------------


def test_ready_node_is_no_fault() -> None:
    assert parse_node(NODE_READY) == ([], [])


@pytest.mark.parametrize("status", ["False", "Unknown"])
def test_not_ready_node_is_a_whole_node_l6_fault(status: str) -> None:
    faults, problems = parse_node(node_not_ready(status=status))
    assert problems == []
    (fault,) = faults
    assert (fault.node_name, fault.npu_name, fault.level, fault.fault_type) == (NODE, "", levels.L6, "NodeNotReady")
    assert fault.fault_codes == ("NodeNotReady",)
    assert fault.fault_time_unix_sec == 1760002200.0  # 2025-10-09T09:30:00Z
    assert fault.source == "k8s"


def test_node_without_ready_condition_is_no_fault() -> None:
    assert parse_node({"metadata": {"name": NODE}, "status": {"conditions": []}}) == ([], [])
    assert parse_node({"metadata": {"name": NODE}}) == ([], [])


@pytest.mark.parametrize(
    ("obj", "needle"),
    [
        ({"metadata": {}}, "no metadata.name"),
        ({"metadata": {"name": NODE}, "status": {"conditions": "Ready"}}, "not a list"),
        (node_not_ready(status="Maybe"), "status='Maybe'"),
    ],
)
def test_malformed_nodes_are_reported(obj, needle) -> None:
    faults, problems = parse_node(obj)
    assert faults == [] and needle in problems[0]


def test_node_with_bad_transition_time_still_faults() -> None:
    faults, problems = parse_node(node_not_ready(when="half past nine"))
    assert len(faults) == 1 and faults[0].fault_time_unix_sec == 0.0
    assert "lastTransitionTime='half past nine'" in problems[0]
