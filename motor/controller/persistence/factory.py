"""The choice of runtime store backend from the controller's configuration."""

from __future__ import annotations

import logging

from motor.common.config.tls import ClientTlsConfig
from motor.controller.config import StoreConfig
from motor.controller.fencing import Leadership
from motor.controller.persistence.base import RuntimeStore
from motor.controller.persistence.etcd import EtcdRuntimeStore
from motor.controller.persistence.memory import MemoryRuntimeStore

logger = logging.getLogger(__name__)


def open_runtime_store(config: StoreConfig, tls: ClientTlsConfig | None = None,
                       leadership: Leadership | None = None) -> RuntimeStore:
    """The store `config` asks for: etcd when endpoints are configured, else in memory (logged).
    `tls` (TLS with a client certificate towards etcd) defaults to config.tls; `leadership` fences
    every etcd write (leader election among Controller replicas)."""
    if not config.etcd_endpoints:
        logger.warning("no etcd endpoints configured: using in-memory store; state is lost on restart")
        return MemoryRuntimeStore()
    store = EtcdRuntimeStore.from_config(config, tls, leadership)
    logger.info("runtime store: %s (request timeout %gs)", store.description, config.request_timeout_sec)
    return store
