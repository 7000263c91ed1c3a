"""The choice of runtime store backend from the controller's configuration."""

from __future__ import annotations

import logging

from motor.common.config import StoreConfig
from motor.controller.persistence.base import RuntimeStore
from motor.controller.persistence.etcd import EtcdRuntimeStore
from motor.controller.persistence.memory import MemoryRuntimeStore

logger = logging.getLogger(__name__)


def open_runtime_store(config: StoreConfig) -> RuntimeStore:
    """The store `config` asks for: etcd when endpoints are configured, else in memory (logged)."""
    if not config.etcd_endpoints:
        logger.warning("no etcd endpoints configured: using in-memory store; state is lost on restart")
        return MemoryRuntimeStore()
    store = EtcdRuntimeStore.from_config(config)
    logger.info("runtime store: %s (request timeout %gs)", store.description, config.request_timeout_sec)
    return store
