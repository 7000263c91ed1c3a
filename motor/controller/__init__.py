"""motor-controller: assembles instances from NodeManager registrations, takes in fault evidence,
runs recovery strategies and reports the RFC §7 runtime.

Modules:
  main             the process: config, gRPC and HTTP servers, ready file {grpc_port, http_port}
  config           ControllerConfig: servers, store, hardware sources, leader election, timers
  replica          ControllerReplica: one process's parts and their election-driven lifecycle
                   (main's composition without sockets; the simulation composes it too)
  core             ControllerCore: registration, heartbeats, fault intake, periodic SET, restore,
                   taking over and giving up leadership (a standby serves a read-only view)
  election         LeaderElection: campaign / observe / keep the lease of replicas on one etcd key
  fencing          Fence (one leadership term, its lease deadline) and Leadership (the shared
                   holder every write, peer call and servicer checks)
  servicer         gRPC `motor.v1.Controller` adapted to ControllerCore (validation, status codes)
  identity         IdentityGate: a NodeManager's claims (pod IP, address, ranks) against its certificate
  heartbeat_streams  the open HeartbeatStreams, ended when the replica stops
  software_reports   software fault reports taken one or several of one pod at a time (servicer and simulation)
  clients          one client wrapper per peer (NodeManager, Coordinator), PeerCallError, ControllerPeers
  router_client    VllmRouterClient: vllm-router's worker API (deadlines, retries with backoff)
  instances        InstanceRegistry: pods → instances, immutable original ranks, assembly, capability
  serving          the serving projection (Instance view of the survivors) and EventPusher (ADD/DEL/SET
                   to the Coordinator)
  status           runtime as protobuf, `message_json` (the one JSON rendering of the pages),
                   RuntimeBroadcaster (Watch), the aiohttp status and timeline pages
  clock            SystemClock and ManualClock (tests)
  metrics          ControllerMetrics: Prometheus metrics fed by the typed timeline and the runtime

Packages:
  model            the shared domain types: runtime and phases, capability, placement (pure)
  fault_tolerance  the RFC's domain (pure) and its strategies (side effects through `clients`)
  persistence      the persisted record, memory and etcd stores, RuntimePersister and the restart rule
  publishers       serving publishers besides the Coordinator (vllm-router) and the fan-out that every
                   publication goes through
  hardware         MindCluster fault intake: sources, parsing, mapping to original ranks
  console          the operator web console at /ui: fleet rows, instance pages, the live feed (SSE)
  restoration      capacity restoration: replacement pods, the restoration strategy, RestoreInstance

Layers, each importing only the ones below it (siblings on one line import each other neither; the
`layers` contract in pyproject.toml checks this):
  main
  servicer | replica
  identity | heartbeat_streams | software_reports
                                        which pod a NodeManager may speak for; the open heartbeat
                                        streams; taking software fault reports
  console                               the operator web console (/ui), read-only
  core                                  the composition root
  restoration                           capacity restoration (pods replaced, RestoreInstance, auto mode)
  election | metrics | status
  fault_tolerance
  persistence | serving
  instances | clients
  fencing | model | clock | hardware
  config
"""
