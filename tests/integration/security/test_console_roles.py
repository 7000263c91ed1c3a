"""The operator console (/ui) on a real mTLS Controller's status listener (port 0, the dev PKI):
the monitor and operator certificates read every console route, the live feed included; the other
roles get 403 naming the route and their role; a client without a certificate does not get past the
TLS handshake."""

from __future__ import annotations

import asyncio
import json
import ssl
import urllib.error
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from motor.common.pki import DevPki, create_dev_pki
from motor.common.security import Role, http_client_context

from .mtls_controller import mtls_controller

pytestmark = pytest.mark.timeout(60)

ROUTES = ("/ui/", "/ui/static/console.js", "/ui/static/fleet.js", "/ui/api/fleet", "/ui/events")


@pytest.fixture
def pki(tmp_path: Path) -> DevPki:
    return create_dev_pki(tmp_path / "pki")


@pytest.fixture
async def http_port(pki: DevPki) -> AsyncIterator[int]:
    async with mtls_controller(pki) as (_, info):
        yield info["http_port"]


def _get(url: str, context: ssl.SSLContext) -> tuple[int, str, str]:
    """(status, content type, the body's first line): the event stream never ends, so one line is read."""
    try:
        with urllib.request.urlopen(url, context=context, timeout=5) as resp:
            return resp.status, resp.headers.get("Content-Type", ""), resp.readline().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers.get("Content-Type", ""), exc.read().decode()


def _context(pki: DevPki, role: Role) -> ssl.SSLContext:
    return http_client_context(pki.ca_file, pki.cert_file(role), pki.key_file(role))


async def test_monitor_and_operator_read_the_console_and_other_roles_are_refused(pki: DevPki, http_port: int) -> None:
    base = f"https://127.0.0.1:{http_port}"
    for role in (Role.MONITOR, Role.OPERATOR):
        for path in ROUTES:
            status, kind, first = await asyncio.to_thread(_get, base + path, _context(pki, role))
            assert status == 200, (role, path, first)
            if path == "/ui/events":
                assert kind.startswith("text/event-stream") and first.startswith("retry: "), (kind, first)
        status, _, body = await asyncio.to_thread(_get, base + "/ui/api/fleet", _context(pki, role))
        assert json.loads(body)["rows"] == [] and json.loads(body)["leadership"]["is_leader"]
    for role in (Role.NODEMANAGER, Role.COORDINATOR):
        for path in ROUTES:
            status, _, body = await asyncio.to_thread(_get, base + path, _context(pki, role))
            assert status == 403 and f"role {role.value}" in body, (role, path, body)


async def test_a_client_without_a_certificate_is_refused_at_the_handshake(pki: DevPki, http_port: int) -> None:
    anonymous = ssl.create_default_context(cafile=str(pki.ca_file))
    with pytest.raises((ssl.SSLError, urllib.error.URLError, ConnectionResetError)):
        await asyncio.to_thread(_get, f"https://127.0.0.1:{http_port}/ui/", anonymous)


async def test_the_controller_stops_while_a_console_stream_is_open(pki: DevPki) -> None:
    """An open /ui/events stream (a browser left on the page) ends, whole, with the server: stop
    returns and the browser sees the stream's end (it then reconnects)."""
    import aiohttp

    async with aiohttp.ClientSession() as session:
        async with mtls_controller(pki) as (service, info):
            resp = await session.get(f"https://127.0.0.1:{info['http_port']}/ui/events",
                                     ssl=_context(pki, Role.MONITOR))
            assert (await resp.content.readline()).startswith(b"retry: ")
            stopping = asyncio.create_task(service.stop())
            await asyncio.wait_for(asyncio.shield(stopping), 15)
            rest = await resp.content.read()  # to the end of a whole chunked body (a cut one raises)
            assert rest.startswith(b"event: hello") and rest.endswith(b'"rows":[]}\n\n'), rest
            resp.release()
