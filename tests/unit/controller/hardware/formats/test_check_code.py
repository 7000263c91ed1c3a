"""CheckCodes computed as MindCluster computes them: sha256 over Go's json.Marshal."""

from __future__ import annotations

import json

from motor.controller.hardware.formats.check_code import device_info_check_code, go_json, go_string, node_info_check_code

from ..samples import A5_CARDS, DEVICE_INFO_CFG, HOT_RESET, device_info_cfg, device_info_text, sha


def test_check_code_is_go_compatible() -> None:
    # The sample's CheckCode is sha256 of the DeviceInfo text as written (as Go marshals it).
    for text in (DEVICE_INFO_CFG, device_info_cfg(device_info_text(HOT_RESET)), device_info_cfg(device_info_text(A5_CARDS))):
        assert device_info_check_code(json.loads(text)["DeviceInfo"]) == json.loads(text)["CheckCode"]


def test_check_code_escapes_html_characters_like_go() -> None:
    info_text = '{"DeviceList":{"k":"a\\u003cb\\u003e\\u0026c"},"UpdateTime":5}'
    import hashlib

    assert device_info_check_code(json.loads(info_text)) == hashlib.sha256(info_text.encode()).hexdigest()


def test_go_json_matches_go() -> None:
    assert go_string('a<b>&c"\\\n\t\x01\u2028é') == '"a\\u003cb\\u003e\\u0026c\\"\\\\\\n\\t\\u0001\\u2028é"'
    assert go_json({"b": 1, "a": [True, None, 1.0]}) == '{"a":[true,null,1],"b":1}'
    assert go_json({"b": 1, "a": 2, "z": 3}, {"": ("b", "a")}) == '{"b":1,"a":2,"z":3}'
    info = {"FaultDevList": [{"FaultLevel": "SeparateFault", "DeviceId": 0, "FaultCode": ["0C000025"], "DeviceType": "CPU"}],
            "NodeStatus": "UnHealthy"}
    text = '{"FaultDevList":[{"DeviceType":"CPU","DeviceId":0,"FaultCode":["0C000025"],"FaultLevel":"SeparateFault"}],"NodeStatus":"UnHealthy"}'
    assert node_info_check_code(info) == sha(text)
