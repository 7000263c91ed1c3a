"""An endpoint's instance_route (SGLang's one inference endpoint) is checked at registration and
kept in the topology and the serving view the Coordinator gets, which drops a removed rank."""

from __future__ import annotations

import pytest
from .controller_fakes import register_request, two_pods

from motor.controller.instances import InstanceRegistry, RegistrationError
from motor.controller.model.runtime import FtRuntimeStore
from motor.controller.serving import project_serving_view


def routed(address: str, host: str = "127.0.0.2", port: int = 30000):
    req = register_request(two_pods(), address)
    for ep in req.endpoints:
        ep.instance_route.host, ep.instance_route.port = host, port
    return req


def test_the_route_reaches_the_serving_view_of_the_surviving_ranks() -> None:
    registry = InstanceRegistry()
    for address in two_pods().pods:
        record, _ = registry.register(routed(address), 0.0)
    assert record.assembled
    topology = record.topology()
    runtime = FtRuntimeStore(scale_down_enabled=True).create(7, (0, 1, 2, 3), "instance_reconfiguration",
                                                             dead_committed=(1,))
    view = project_serving_view(topology, runtime)
    assert [e.id for e in view.endpoints] == [0, 2, 3]
    assert {(e.instance_route.host, e.instance_route.port) for e in view.endpoints} == {("127.0.0.2", 30000)}
    assert [e.business_port for e in view.endpoints] == [8000, 8002, 8003]  # the ranks' own ports kept


@pytest.mark.parametrize(("host", "port"), [("", 30000), ("a b", 30000), ("h", 0), ("h", 70000)])
def test_a_bad_route_is_refused_naming_the_endpoint_and_the_value(host: str, port: int) -> None:
    with pytest.raises(RegistrationError) as info:
        InstanceRegistry().register(routed("127.0.0.2:1", host, port), 0.0)
    assert f"endpoint 0 instance_route {host!r}:{port} is not host:port" in str(info.value)


def test_a_headless_endpoint_with_a_route_is_refused() -> None:
    req = routed("127.0.0.2:1")
    req.endpoints[1].headless = True
    with pytest.raises(RegistrationError, match="endpoint 1 is headless but has an instance_route"):
        InstanceRegistry().register(req, 0.0)
