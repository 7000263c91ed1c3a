"""motor-coordinator: routes OpenAI-compatible inference to the serving view the Controller publishes.

Modules:
  serving_view   pure: the published instance/endpoint views, refresh events and errors, and the
                 checks of a refresh that need no table state
  routing        pure routing table: published views, pause flags, revision checks, endpoint
                 selection (least outstanding, rank-aware, cooldown), outstanding accounting
  servicer       gRPC `motor.v1.Coordinator` (Refresh / ListInstances with re-inference counts /
                 SendCanary) adapted to the table, the ledger and the canary, management key check
  engine_client  the one aiohttp client of the engines (connect and total timeouts)
  proxy          one inference request: parse it, choose its relay, run its attempts, metrics
  forwarding     the attempts of every request: pick an endpoint (holding while nothing can serve),
                 send, release, cooldown and retry before the first byte; 503/404 answers
  whole_relay    a request answered as the engine sends it (a stream passed through); a
                 non-streamed one sent again whole once after an engine fault
  stream_relay   a stream continued elsewhere from what the client received after an engine fault
  stall_watch    started streams of a withdrawn endpoint move only once they stall
  openai_format  request ids, body parsing, forwarded headers, OpenAI-shaped error answers
  request_log    the per-request log adapter (request_id, instance, rank on every line)
  canary         the Controller idle-fault probe's one-token completion
  reinference    pure: what can be continued, the SSE tracker and rewrite of a continuation, the next
                 attempt's body
  migration_ledger  pure: migrated and finally failed requests per instance
  metrics        CoordinatorMetrics: requests, retries, holding (per request), migrations, canaries,
                 routing table (at scrape)
  http_api       the aiohttp app (/v1/completions, /v1/chat/completions, /v1/models, /health,
                 /coordinator/instances, /metrics) and its runner
  controller_sync at start, the Controller leader's whole serving view (RequestPublication → a
                 SET) before the ready file; a deposed leader's Refresh and SendCanary are refused
                 by the term fence (motor.common.term_fence)
  main           the process: config, both servers, ready file {grpc_port, http_port}
  config         CoordinatorConfig: servers, controller sync, upstream timeouts, retries, migration

HTTP answers: the engine's own status and body (streams passed through event by event) with
``X-Motor-Endpoint: <instance_id>/<rank>`` and ``X-Request-Id``; a request continued elsewhere after
its engine faulted says so (a stream's last chunk before ``[DONE]`` carries ``motor_migration``
``{"migrations", "endpoints"}``; a non-streamed answer ``X-Motor-Migrated`` and
``X-Motor-Migrated-From``); 400 for a body that is not a JSON
object or a non-string model; 404 ``model_not_found`` for a model never published while others
are; 503 with ``Retry-After`` when nothing can serve (nothing published, the model withdrawn or
paused, every endpoint tried or cooling down). Errors are OpenAI-shaped
``{"error": {"message", "type", "param", "code"}}``.
"""
