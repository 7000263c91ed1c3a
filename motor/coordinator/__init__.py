"""motor-coordinator: routes OpenAI-compatible inference to the serving view the Controller publishes.

Modules:
  routing        pure routing table: published views, pause flags, revision checks, endpoint
                 selection (least outstanding, rank-aware, cooldown), outstanding accounting
  servicer       gRPC `motor.v1.Coordinator` (Refresh / ListInstances with re-inference counts /
                 SendCanary) adapted to the table and the proxy, management key check
  engine_client  the one aiohttp client of the engines (connect and total timeouts)
  proxy          one inference request: route, retry before the first byte, re-inference after an
                 engine fault (a stream continues elsewhere from what the client received), stream
                 pass-through; the idle-fault probe's canary
  reinference    pure: what can be continued, the SSE tracker and rewrite of a continuation, the next
                 attempt's body, per-instance migration counts
  metrics        CoordinatorMetrics: requests, retries, holding (per request), migrations, canaries,
                 routing table (at scrape)
  http_api       the aiohttp app (/v1/completions, /v1/chat/completions, /v1/models, /health,
                 /coordinator/instances, /metrics) and its runner
  controller_sync at start, the Controller leader's whole serving view (RequestPublication → a
                 SET) before the ready file; a deposed leader's Refresh is refused by the term
                 fence (motor.common.term_fence)
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
