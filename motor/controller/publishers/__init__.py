"""Serving publishers: where the Controller's serving view goes.

  base         the publisher interface
  vllm_router  the publisher keeping one vllm-router's membership (/add_worker, /remove_worker,
               /list_workers through motor.controller.router_client) equal to the serving view,
               with a bounded reconcile loop repairing drift
  fanout       the publication every strategy and the periodic SET go through: each call to every
               publisher, acknowledged only when every required one acknowledged

The Coordinator's publisher is `motor.controller.serving.EventPusher`; which publishers run is
`publication` in the Controller's config (motor.common.config.publication).
"""
