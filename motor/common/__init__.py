"""What every Motor process shares (production code: no test or launcher helpers here).

Modules:
  config       the config loader (file + dotted overrides, ConfigError naming each bad key and value)
               and the types every service's model shares: TLS/security, listeners, host:port and
               RFC §7's fault_tolerance_config
  service      process entry of a service: arguments, config, logging, SIGTERM/SIGINT, ready file
  grpc_server  the grpc.aio server bootstrap (health, reflection, TLS/mTLS) and client channels
  metadata     gRPC metadata keys of Motor's contracts
  term_fence   receivers' fence against deposed Controller leaders: the highest leader term seen
               and the server interceptor refusing older ones
  leader_client LeaderFollowingClient: calls to the Controller leader among its replicas (a
               standby names the leader), LeaderUnavailable while none leads
  process      ManagedProcess: start an OS process in its own process group with a log file, wait
               for its readiness (ready file / HTTP 200), stop or kill the whole group by pid
  ports        free_port(s) on an address and port_free, the one check that a port can be bound
  text         shorten: bounded rendering of untrusted values for errors and logs
  metrics_http the `GET /metrics` route (Prometheus text format) and a listener of its own
  http_site    start_site: an aiohttp app bound to a host:port, a failed bind named
  security     the one `security` switch (mTLS everywhere), roles from certificate SAN URIs
               spiffe://motor/<role>, SSL contexts of the HTTP pages, the plaintext log line
  authz        the role table of every gRPC method, the shared server interceptor and the HTTP
               middleware (PERMISSION_DENIED / 403, logged, counted, refusal hooks)
  validation   bounds on every request field (INVALID_ARGUMENT naming the field path)
  pki          a development CA and one certificate per role (`motorctl certs init`)
"""
