"""A MindCluster ConfigMap in every shape it arrives in (object, data, key file, dumps), its name → node
and kind, and the documents no parser can use."""

from __future__ import annotations

import json

import pytest
import yaml

from motor.controller.hardware.formats.configmap import parse_configmap
from motor.controller.hardware.formats.names import document_kind, node_from_configmap_name

from ..samples import DEVICE_INFO_CFG, NODE, configmap_object, full_data


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


def test_configmap_name_to_node() -> None:
    assert node_from_configmap_name("mindx-dl-deviceinfo-worker-7") == "worker-7"
    assert node_from_configmap_name("mindx-dl-deviceinfo-") is None
    assert node_from_configmap_name("mindx-dl-nodeinfo-worker-7") is None
    assert document_kind("mindx-dl-deviceinfo-worker-7") == ("deviceinfo", "worker-7")
    assert document_kind("mindx-dl-nodeinfo-worker-7") == ("nodeinfo", "worker-7")
    assert document_kind("mindx-dl-nodeinfo-") is None and document_kind("vcjob-fault-npu-cm") is None
