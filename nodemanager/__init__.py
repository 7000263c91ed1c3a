"""motor-nodemanager: the per-pod agent (one per pod/host).

It launches and watches the local engine processes, turns what it sees into fault evidence for the
Controller, and is the only path by which the Controller touches an engine's FT API (RFC §4.4, §6).
Production code only: process and port helpers come from ``motor.common``, and neither the launcher
(``motor.launch``) nor the test doubles (``motor.testing``) are imported here.

Modules:
  main               entry point, NodeManagerService (gRPC server + agent), exit statuses
  config             NodeManagerConfig: the pod, its engines, the Controller, bounds of calls and reports
  agent              the composition root: builds and wires the parts (supervisor, engine HTTP client,
                     Controller client, clock and stop record storage may be given), engine-exit
                     handling, heartbeat alive set and registration, start/stop
  clock              Clock: monotonic and wall time, given to every part that reads time
  engine_lifecycle   EngineLifecycle: initial launch, Start/Stop/RelaunchEngines, grace, DP master
  exit_policy        the pod's own exit: every engine dead (frozen by a live guard), StopPod
  pod_stop           PodStopRecord: a StopPod kept in the pod (a StopStorage: the file in log_dir), so a
                     restarted NodeManager stays stopped
  supervisor         ProcessSupervisor: spawn, readiness (/health), exit watch (pidfd), intentional stop
  engine_command     engine argv templates (reference engine by default)
  engine_answers     the FT API's documents: status/apply/error answers checked by pydantic models
                     (identity contract, diagnosing), their typed errors, the scale_down body
  engine_http        the HTTP bridge to an engine's FT API (bounded status reads and applies)
  ft_poller          EngineFtManager: status polling after readiness, dedupe, fault evidence
                     (diagnosing is no news: never reported)
  reporter           FaultReporter: bounded queue, a report owed until the Controller acknowledges it
                     (backoff; held while no Controller replica leads; a newer one of the rank supersedes it)
  controller_client  the one client wrapper for the Controller peer (deadlines, follows the leader
                     among the replicas: motor.common.leader_client)
  controller_link    registration (retried forever; again under a new leader term) and heartbeat,
                     config adoption, telling when the Controller may have lost the pod's reports
  device_ids         configured device ids checked against the pod's huawei.com NPU annotation
  guard              transaction guard / lease (pure, injectable clock), apply-once record
  pod_state          proxy switch and retired endpoints
  endpoints          local endpoints and the id checks every RPC applies
  ft_proxy           guard/status/apply/finalize as plain functions
  settle             the Status long poll: the (status, ft_state) pairs to wait out, re-read cadence
  ft_service         motor.v1.NodeManagerFaultTolerance servicer
  lifecycle_service  motor.v1.NodeManager servicer
  errors, rpc        typed refusals and their one mapping to gRPC status codes
  metrics            NodeManagerMetrics: polls, reports, exits, guard, applies (GET /metrics on metrics_http)
"""
