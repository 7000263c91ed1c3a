"""Starting Motor on this machine as real processes: `motor demo`, the e2e tests, the benchmarks.

Never imported by production services (the NodeManager takes its process and port helpers from
``motor.common``).

Modules:
  cluster   ClusterSpec and LocalCluster: controller, coordinator, NodeManagers on distinct loopback
            IPs and their reference engines, readiness, observation (runtime, timeline, published
            set), fault injection, teardown by pid; a cluster starts once
  etcd      a throw-away single-member etcd server (start_etcd / astart_etcd)
  load      LoadGenerator: a bounded stream of completions through the Coordinator, every outcome kept
  shutdown  SIGTERM in a cluster holder: exit_on_sigterm (raise Terminated, exit 143 after cleanup)
            and sigterm_deferred (a teardown is never cut short)
"""
