"""Log records of one inference request: every message starts with ``request_id=<id>``, and with
``instance=<id> rank=<rank>`` too once an attempt has its endpoint, so one grep follows a request
across retries and migrations. The same ids are set as record attributes (``request_id``,
``instance``, ``rank``) for structured handlers.
"""

from __future__ import annotations

import logging
from collections.abc import MutableMapping
from typing import Any

from motor.coordinator.routing import Route


class RequestLog(logging.LoggerAdapter[logging.Logger]):
    def __init__(self, logger: logging.Logger, request_id: str, route: Route | None = None) -> None:
        extra: dict[str, Any] = {"request_id": request_id}
        prefix = f"request_id={request_id}"
        if route is not None:
            extra.update(instance=route.instance_id, rank=route.rank)
            prefix += f" instance={route.instance_id} rank={route.rank}"
        super().__init__(logger, extra)
        self.request_id = request_id
        # The prefix is part of the %-format string: a literal % in it must not become a placeholder.
        self._prefix = prefix.replace("%", "%%") + " "

    def routed(self, route: Route) -> RequestLog:
        """The log of one attempt of this request, on ``route``."""
        return RequestLog(self.logger, self.request_id, route)

    def process(self, msg: Any, kwargs: MutableMapping[str, Any]) -> tuple[Any, MutableMapping[str, Any]]:
        kwargs["extra"] = {**(self.extra or {}), **kwargs.get("extra", {})}
        return self._prefix + str(msg), kwargs
