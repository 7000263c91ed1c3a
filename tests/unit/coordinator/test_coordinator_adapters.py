"""Pure parts of the adapters: proto <-> routing-table conversion, request parsing, request ids."""

from __future__ import annotations

import pytest
from aiohttp.test_utils import make_mocked_request

from gen.motor.v1 import common_pb2
from motor.coordinator.openai_format import BadRequest, parse_inference_body, request_id_of
from motor.coordinator.serving_view import EndpointSpec, InstanceSpec
from motor.coordinator.servicer import instance_from_proto, instance_to_proto


def test_instance_conversion_keeps_every_field_and_echoes_the_proto() -> None:
    msg = common_pb2.Instance(id=7, role=common_pb2.ROLE_DECODE, model="m", dp_size=4)
    msg.pods.add(pod_ip="127.0.0.2", node_name="n1", node_manager_address="127.0.0.2:5000", endpoint_ids=[0, 2])
    msg.endpoints.add(id=0, ip="127.0.0.2", business_port=8000, mgmt_port=8100,
                      device_infos=[common_pb2.DeviceInfo(device_id="Ascend910-0")])
    msg.endpoints.add(id=2, ip="127.0.0.2", headless=True)
    spec = instance_from_proto(msg)
    assert spec == InstanceSpec(7, "m", (EndpointSpec(0, "127.0.0.2", 8000, 8100), EndpointSpec(2, "127.0.0.2", 0, 0, True)),
                                role="ROLE_DECODE", dp_size=4)
    msg.model = "changed after publication"
    assert instance_to_proto(spec).model == "m", "the published proto is a copy"
    assert instance_to_proto(spec).pods[0].node_name == "n1"


def test_instance_to_proto_without_source() -> None:
    spec = InstanceSpec(3, "m", (EndpointSpec(1, "10.0.0.1", 9000),), role="ROLE_UNION", dp_size=2)
    out = instance_to_proto(spec)
    assert (out.id, out.model, out.role, out.dp_size) == (3, "m", common_pb2.ROLE_UNION, 2)
    assert [(e.id, e.ip, e.business_port) for e in out.endpoints] == [(1, "10.0.0.1", 9000)]


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b'{"model": "m", "prompt": "x"}', ("m", False)),
        (b'{"prompt": "x", "stream": true}', (None, True)),
        (b'{"model": "", "stream": "yes"}', (None, False)),
    ],
)
def test_parse_inference_body(body: bytes, expected) -> None:
    assert parse_inference_body(body) == expected


@pytest.mark.parametrize(
    ("body", "named"),
    [(b"{nope", "not valid JSON"), (b"[1]", "must be a JSON object, got list"), (b'{"model": 3}', "model must be a string, got 3"),
     (b"\xff", "not valid JSON")],
)
def test_bad_bodies_are_refused(body: bytes, named: str) -> None:
    with pytest.raises(BadRequest, match=named):
        parse_inference_body(body)


def test_request_id_is_taken_from_the_client_when_sane() -> None:
    assert request_id_of(make_mocked_request("POST", "/", headers={"X-Request-Id": "abc-1.2:3"})) == "abc-1.2:3"
    for bad in ("", "has space", "x" * 129, "new\nline"):
        rid = request_id_of(make_mocked_request("POST", "/", headers={"X-Request-Id": bad}))
        assert rid != bad and len(rid) == 32
    assert len(request_id_of(make_mocked_request("POST", "/"))) == 32
