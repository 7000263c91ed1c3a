"""The `publication` section: which publishers run, each router's URL and timers; a bad value is
refused at start with a message naming it."""

from __future__ import annotations

import pytest

from motor.common.config.loader import ConfigError, load_config
from motor.controller.clients import ControllerPeers
from motor.controller.config import ControllerConfig


def _load(**overrides) -> ControllerConfig:
    return load_config(ControllerConfig, None, list(overrides.items()))


@pytest.mark.parametrize(("overrides", "named"), [
    ({"publication.publishers": ["vllm_router"]}, "publication.vllm_routers is empty"),
    ({"publication.vllm_routers": [{"url": "http://r:30000"}]}, "does not hold 'vllm_router'"),
    ({"publication.publishers": ["coordinator", "coordinator"]}, "lists 'coordinator' twice"),
    ({"publication.publishers": ["nginx"]}, "nginx"),
    ({"publication.publishers": ["vllm_router"],
      "publication.vllm_routers": [{"url": "http://r:30000"}, {"url": "http://r:30000/"}]}, "'http://r:30000' twice"),
    ({"publication.publishers": ["vllm_router"], "publication.vllm_routers": [{"url": "r:30000"}]}, "'r:30000'"),
    ({"publication.publishers": ["vllm_router"], "publication.vllm_routers": [{"url": "http://r"}]}, "names no port"),
    ({"publication.publishers": ["vllm_router"], "publication.vllm_routers": [{"url": "http://r:1/v1"}]},
     "base URL only"),
    ({"publication.publishers": ["vllm_router"],
      "publication.vllm_routers": [{"url": "http://r:1", "backoff_initial_sec": 5.0}]}, "backoff_initial_sec=5"),
    ({"publication.publishers": ["vllm_router"], "publication.vllm_routers": [{"url": "http://r:1", "attempts": 0}]},
     "attempts"),
])
def test_a_bad_publication_is_refused_naming_the_value(overrides, named: str) -> None:
    with pytest.raises(ConfigError) as err:
        _load(**overrides)
    assert named in str(err.value)


async def test_the_default_publishes_to_the_coordinator_only_and_a_router_list_builds_one_client_each() -> None:
    default = _load(coordinator_address="127.0.0.1:5000")
    peers = ControllerPeers.from_config(default)
    assert peers.coordinator is not None and peers.routers == []
    both = _load(coordinator_address="127.0.0.1:5000", **{
        "publication.publishers": ["coordinator", "vllm_router"],
        "publication.vllm_routers": [{"url": "http://10.0.0.1:30000/"}, {"url": "https://router-1.motor:30000"}]})
    peers = ControllerPeers.from_config(both)
    assert peers.coordinator is not None
    assert [r.address for r in peers.routers] == ["http://10.0.0.1:30000", "https://router-1.motor:30000"]
    routers_only = _load(coordinator_address="127.0.0.1:5000", **{
        "publication.publishers": ["vllm_router"], "publication.vllm_routers": [{"url": "http://10.0.0.1:30000"}]})
    assert ControllerPeers.from_config(routers_only).coordinator is None
