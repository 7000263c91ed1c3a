"""engine_inference_address: the sglang dialect's one inference endpoint, registered on every
non-headless endpoint as its instance_route; refused at start for a per-rank dialect or a bad
address, naming the key."""

from __future__ import annotations

import pytest

from motor.common.config.loader import ConfigError, load_config
from nodemanager.config import NodeManagerConfig
from nodemanager.endpoints import LocalEndpoint

SGLANG = {"controller_address": "127.0.0.1:50051", "instance_id": 7, "dp_size": 2, "pod_ip": "127.0.0.81",
          "engines": [{"dp_rank": 0}, {"dp_rank": 1, "headless": True}], "engine_ft_dialect": "sglang",
          "engine_ft_manager_address": "127.0.0.80:30000"}


def test_sglang_with_an_inference_address() -> None:
    cfg = load_config(NodeManagerConfig, None, [*SGLANG.items(), ("engine_inference_address", "127.0.0.80:30000")])
    assert cfg.engine_inference_address == "127.0.0.80:30000"
    assert load_config(NodeManagerConfig, None, list(SGLANG.items())).engine_inference_address is None


@pytest.mark.parametrize(("overrides", "named"), [
    ({"engine_ft_dialect": "vllm", "engine_ft_manager_address": None},
     "engine_inference_address='127.0.0.80:30000' needs engine_ft_dialect=sglang"),
    ({"engine_ft_dialect": "rfc", "engine_ft_manager_address": None}, "engine_ft_dialect=rfc engines serve"),
    ({"engine_inference_address": "127.0.0.80"}, "address '127.0.0.80' is not host:port"),
    ({"engine_inference_address": "h:70000"}, "address 'h:70000' is not host:port"),
])
def test_refusals_name_the_key(overrides: dict, named: str) -> None:
    data = {**SGLANG, "engine_inference_address": "127.0.0.80:30000", **overrides}
    with pytest.raises(ConfigError) as info:
        load_config(NodeManagerConfig, None, [(k, v) for k, v in data.items() if v is not None])
    assert named in str(info.value) and "engine_inference_address" in str(info.value)


def test_the_registered_endpoint_carries_the_instance_route() -> None:
    routed = LocalEndpoint(0, "127.0.0.81", 8000, False, (), ("127.0.0.80", 30000)).to_pb()
    assert (routed.ip, routed.business_port) == ("127.0.0.81", 8000)
    assert (routed.instance_route.host, routed.instance_route.port) == ("127.0.0.80", 30000)
    assert not LocalEndpoint(1, "127.0.0.81", 0, True, (), ("127.0.0.80", 30000)).to_pb().HasField("instance_route")
    assert not LocalEndpoint(0, "127.0.0.81", 8000, False).to_pb().HasField("instance_route")
