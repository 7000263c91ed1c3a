"""Starting Motor on this machine as real processes: `motor demo`, the e2e tests, the benchmarks.

Never imported by production services (the NodeManager takes its process and port helpers from
``motor.common``).

Modules:
  spec      ClusterSpec (instances, pods, control-plane settings), pod addresses, port plans
  render    the services' configs rendered from a spec (pure)
  engines   the engine backends: ReferenceEngines (motor-engine-sim per rank, started by the
            NodeManagers) and LightEngines (fake groups, many ranks per process, for fleets)
  processes spawning services, ready files, relaunch, teardown by pid and process group
  observe   runtime, timeline, etcd view, scrapes, published view, journals and the waits on them
  cluster   LocalCluster: controller, coordinator and NodeManagers on their own loopback IPs over an
            engine backend; start, fault injection, kills and restarts, teardown; starts once
  etcd      a throw-away single-member etcd server (start_etcd / astart_etcd)
  load      LoadGenerator: a bounded stream of completions through the Coordinator, every outcome kept
  shutdown  SIGTERM in a cluster holder: exit_on_sigterm (raise Terminated, exit 143 after cleanup)
            and sigterm_deferred (a teardown is never cut short)
"""
