"""A cluster's configs rendered from its spec, without a process: pod addresses, port plans, and the
Coordinator's, Controllers' and NodeManagers' configs on either engine backend."""

from __future__ import annotations

from pathlib import Path

import pytest

from motor.controller.config import ControllerConfig

from motor.coordinator.config import CoordinatorConfig

from nodemanager.config import NodeManagerConfig
from motor.launch import render
from motor.launch.engines import LightEngines, ReferenceEngines
from motor.launch.spec import ClusterSpec, PodPlan, PortsPlan, fixed_ports

RUN_DIR = Path("/tmp/motor-run")
PORTS = PortsPlan(dp_master_port={1: 29001}, dp_store_port_base={1: 24000})
CONTROLLERS = ["127.0.0.1:5001", "127.0.0.1:5002"]


def _nm(spec: ClusterSpec, pod: PodPlan, engines, ports: PortsPlan = PORTS) -> dict:
    return render.nodemanager_config(spec, pod, controller_addresses=CONTROLLERS, ports=ports,
                                     engine_keys=engines.nodemanager_keys(spec, pod, RUN_DIR),
                                     log_dir=f"{RUN_DIR}/engines-{pod.ip}")


def test_shared_plan_puts_one_instance_on_consecutive_loopback_addresses() -> None:
    spec = ClusterSpec(dp_size=6, ranks_per_pod=2)
    assert spec.pods() == [("127.0.0.2", [0, 1]), ("127.0.0.3", [2, 3]), ("127.0.0.4", [4, 5])]
    assert [p.name for p in spec.all_pods()] == ["nodemanager-127.0.0.2", "nodemanager-127.0.0.3",
                                                 "nodemanager-127.0.0.4"]
    assert ClusterSpec(dp_size=2, ranks_per_pod=2, first_pod_ip=10).pods() == [("127.0.0.10", [0, 1])]


def test_per_instance_plan_gives_every_instance_its_own_range() -> None:
    spec = ClusterSpec(instances=2, dp_size=16 * 201, ranks_per_pod=16, address_plan="per_instance")
    assert spec.instance_ids() == [1, 2]
    assert spec.pod_ip(1, 0) == "127.100.0.2" and spec.pod_ip(2, 0) == "127.101.0.2"
    assert spec.pod_ip(1, 199) == "127.100.0.201" and spec.pod_ip(1, 200) == "127.100.1.2"
    pods = spec.all_pods()
    assert len(pods) == 2 * 201 and len({p.ip for p in pods}) == len(pods)
    assert pods[201] == PodPlan(2, 0, "127.101.0.2", list(range(16)))


@pytest.mark.parametrize(("kwargs", "error"), [
    ({"dp_size": 5, "ranks_per_pod": 2}, "not a multiple"),
    ({"instances": 2}, "address_plan 'per_instance'"),
    ({"controller_replicas": 2}, "needs etcd"),
    ({"controller_replicas": 0}, "controller_replicas 0"),
    ({"nodemanagers_per_process": 0}, "nodemanagers_per_process 0"),
])
def test_spec_refuses_what_cannot_start(kwargs: dict, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        ClusterSpec(**kwargs)


def test_fixed_ports_give_each_instance_a_disjoint_block() -> None:
    plan = fixed_ports(ClusterSpec(instances=3, dp_size=16, ranks_per_pod=8, address_plan="per_instance"))
    assert plan.dp_master_port == {1: 20998, 2: 20997, 3: 20996}
    assert plan.dp_store_port_base == {1: 21000, 2: 21024, 3: 21048}


def test_coordinator_config_listens_on_loopback_with_overrides() -> None:
    spec = ClusterSpec(coordinator_overrides={"migration.enabled": False})
    cfg = render.coordinator_config(spec, security={"enabled": True})
    assert cfg["server"] == {"host": "127.0.0.1", "port": 0} and cfg["http"] == {"host": "127.0.0.1", "port": 0}
    assert cfg["migration"] == {"enabled": False} and cfg["security"] == {"enabled": True}
    assert "security" not in render.coordinator_config(ClusterSpec())
    CoordinatorConfig.model_validate(render.coordinator_config(ClusterSpec()))


def test_controller_config_timing_store_and_replicas() -> None:
    spec = ClusterSpec(start_etcd=True, controller_replicas=2, leader_lease_ttl_sec=3,
                       controller_overrides={"heartbeat_timeout_sec": 9.0})
    cfg = render.controller_config(spec, 1, coordinator_address="127.0.0.1:7000",
                                   store_endpoints=["127.0.0.1:2379"], store_key_prefix="/motor-run")
    assert cfg["coordinator_address"] == "127.0.0.1:7000"
    assert cfg["fault_tolerance_config"] == {"enable_fault_tolerance": True, "enable_dp_scale_down": True,
                                             "enable_dp_scale_up": False}
    assert (cfg["heartbeat_interval_sec"], cfg["heartbeat_timeout_sec"], cfg["publish_interval_sec"],
            cfg["reconfiguration_timeout_sec"]) == (1.0, 9.0, 3.0, 120.0)  # the override wins
    assert cfg["store"] == {"etcd_endpoints": ["127.0.0.1:2379"], "key_prefix": "/motor-run"}
    assert cfg["leader_election"] == {"replica_id": "controller-1", "lease_ttl_sec": 3}
    ControllerConfig.model_validate(cfg)


def test_controller_config_leaves_unset_timing_to_the_controller() -> None:
    spec = ClusterSpec(heartbeat_timeout_sec=None, publish_interval_sec=None, reconfiguration_timeout_sec=None)
    cfg = render.controller_config(spec, 0, coordinator_address="127.0.0.1:7000", store_endpoints=[],
                                   store_key_prefix="/motor-run")
    assert not {"heartbeat_timeout_sec", "publish_interval_sec", "reconfiguration_timeout_sec", "store",
                "leader_election", "security"} & set(cfg)
    assert spec.replica_name(0) == "controller"
    defaults = ControllerConfig.model_validate(cfg)
    assert defaults.publish_interval_sec == ControllerConfig.model_fields["publish_interval_sec"].default


def test_reference_nodemanager_config_runs_the_reference_engine_with_the_spec_flags() -> None:
    spec = ClusterSpec(dp_size=4, ranks_per_pod=2, engine_args=["--ft-dialect", "rfc"],
                       nodemanager_overrides={"engine_stop_grace_sec": 3.0},
                       pod_overrides={"127.0.0.3": {"engine_stop_grace_sec": 4.0}})
    first, second = spec.all_pods()
    cfg = _nm(spec, second, ReferenceEngines())
    assert cfg["server"] == {"host": "127.0.0.3", "port": 0} and cfg["metrics_http"]["host"] == "127.0.0.3"
    assert (cfg["pod_ip"], cfg["node_name"], cfg["instance_id"], cfg["dp_size"]) == ("127.0.0.3", "node-127.0.0.3", 1, 4)
    assert cfg["controller_address"] == CONTROLLERS[0] and cfg["controller_addresses"] == CONTROLLERS[1:]
    assert (cfg["dp_master_ip"], cfg["dp_master_port"], cfg["dp_store_port_base"]) == ("127.0.0.2", 29001, 24000)
    assert cfg["engines"] == [{"dp_rank": 2, "device_infos": [{"device_id": "Ascend910-0"}]},
                              {"dp_rank": 3, "device_infos": [{"device_id": "Ascend910-1"}]}]
    args = cfg["engine_extra_args"]
    assert args[args.index("--num-experts") + 1] == "4" and "--enable-fault-injection" in args
    assert args[args.index("--apply-journal") + 1] == f"{RUN_DIR}/engine-applies-rank{{dp_rank}}.jsonl"
    assert args[-2:] == ["--ft-dialect", "rfc"] and "engine_command" not in cfg
    assert cfg["ft_capability"]["num_redundant_experts"] == 12
    assert cfg["engine_stop_grace_sec"] == 4.0  # the pod's own override after every pod's
    assert _nm(spec, first, ReferenceEngines())["engine_stop_grace_sec"] == 3.0
    NodeManagerConfig.model_validate(cfg)


def test_engine_command_replaces_the_reference_engine_flags() -> None:
    spec = ClusterSpec(dp_size=2, ranks_per_pod=2, engine_command=["vllm", "--port", "{port}"],
                       capability={"auto_recovery": True})
    cfg = _nm(spec, spec.all_pods()[0], ReferenceEngines())
    assert cfg["engine_command"] == ["vllm", "--port", "{port}"] and cfg["engine_extra_args"] == []
    assert cfg["ft_capability"]["auto_recovery"] is True


def test_light_nodemanager_config_supervises_placeholders_on_fixed_ports() -> None:
    spec = ClusterSpec(instances=2, dp_size=16, ranks_per_pod=8, address_plan="per_instance",
                       engine_poll_interval_sec=8.0)
    engines = LightEngines()
    pod = spec.all_pods()[3]  # instance 2, pod 1
    cfg = _nm(spec, pod, engines, fixed_ports(spec))
    assert (pod.instance_id, cfg["pod_ip"], cfg["dp_master_ip"]) == (2, "127.101.0.3", "127.101.0.2")
    assert [(e["dp_rank"], e["port"]) for e in cfg["engines"]] == [(8 + i, 18000 + i) for i in range(8)]
    assert cfg["engine_command"][-1] == "infinity" and cfg["engine_command"][0].endswith("sleep")
    assert (cfg["dp_master_port"], cfg["dp_store_port_base"]) == (20997, 21024)
    assert cfg["fault_tolerance_config"]["engine_status_poll_interval_sec"] == 8.0
    assert engines.engine_address(spec, 2, 9) == ("127.101.0.3", 18001)
    NodeManagerConfig.model_validate(cfg)


def test_light_group_serves_every_rank_of_an_instance_on_its_pod_address() -> None:
    spec = ClusterSpec(dp_size=4, ranks_per_pod=2, address_plan="per_instance")
    argv = LightEngines(diagnosing_sec=0.5, checkin_sec=3.0).group_argv(spec, 1, RUN_DIR / "ready.json")
    assert argv[argv.index("--endpoints") + 1] == "127.100.0.2:18000,127.100.0.2:18001,127.100.0.3:18000,127.100.0.3:18001"
    assert argv[argv.index("--ranks") + 1] == "0,1,2,3"
    assert argv[argv.index("--diagnosing-sec") + 1] == "0.5" and argv[argv.index("--checkin-sec") + 1] == "3.0"


def test_restartable_light_placeholders_report_to_the_groups_control_listener() -> None:
    spec = ClusterSpec(dp_size=4, ranks_per_pod=2)
    engines = LightEngines(restartable=True)
    cfg = _nm(spec, spec.all_pods()[1], engines, fixed_ports(spec))
    assert cfg["engine_command"][1:] == ["-m", "motor.testing.fake_placeholder", "--control", "http://127.0.0.2:17999",
                                         "--rank", "{dp_rank}"]
    argv = engines.group_argv(spec, 1, RUN_DIR / "ready.json")
    assert argv[argv.index("--control") + 1] == "127.0.0.2:17999"
    assert "--control" not in LightEngines().group_argv(spec, 1, RUN_DIR / "ready.json")
    NodeManagerConfig.model_validate(cfg)


@pytest.mark.parametrize("pin_ranks", [True, False])
def test_sglang_nodemanager_config_routes_inference_through_the_manager_unless_told_not_to(pin_ranks: bool) -> None:
    from motor.launch.sglang_engines import SglangEngines

    spec = ClusterSpec(dp_size=4, ranks_per_pod=2, first_pod_ip=80)
    engines = SglangEngines(pin_ranks=pin_ranks)
    engines.managers[1] = ("127.0.0.80", 30000)  # plan_ports picks a free one
    pod = spec.all_pods()[1]
    cfg = NodeManagerConfig.model_validate(_nm(spec, pod, engines))
    assert (cfg.engine_ft_dialect, cfg.engine_ft_manager_address) == ("sglang", "127.0.0.80:30000")
    assert cfg.engine_inference_address == ("127.0.0.80:30000" if pin_ranks else None)
