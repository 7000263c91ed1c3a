"""motor-coordinator: routes OpenAI-compatible inference to the serving view the Controller publishes.

Modules:
  routing        pure routing table: published views, pause flags, revision checks, endpoint
                 selection (least outstanding, rank-aware, cooldown), outstanding accounting
  servicer       gRPC `motor.v1.Coordinator` (Refresh / ListInstances) adapted to the table,
                 management key check
  engine_client  the one aiohttp client of the engines (connect and total timeouts)
  proxy          one inference request: route, retry before the first byte, stream pass-through
  metrics        CoordinatorMetrics: requests, retries, holding (per request), routing table (at scrape)
  http_api       the aiohttp app (/v1/completions, /v1/chat/completions, /v1/models, /health,
                 /coordinator/instances, /metrics) and its runner
  main           the process: config, both servers, ready file {grpc_port, http_port}

HTTP answers: the engine's own status and body (streams passed through chunk by chunk) with
``X-Motor-Endpoint: <instance_id>/<rank>`` and ``X-Request-Id``; 400 for a body that is not a JSON
object or a non-string model; 404 ``model_not_found`` for a model never published while others
are; 503 with ``Retry-After`` when nothing can serve (nothing published, the model withdrawn or
paused, every endpoint tried or cooling down). Errors are OpenAI-shaped
``{"error": {"message", "type", "param", "code"}}``.
"""
