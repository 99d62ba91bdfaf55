"""A small asyncio client of the Kubernetes API (the node emulator's only I/O to the API)."""

from __future__ import annotations

import json
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp

MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"


class ApiError(RuntimeError):
    """The API answered with an error status."""

    def __init__(self, status: int, method: str, path: str, body: str) -> None:
        super().__init__(f"{method} {path}: {status} {body[:300]}")
        self.status = status


class KubeApi:
    """Bearer-token client of one API server; use as an async context manager."""

    def __init__(self, server: str, token: str, ca_file: Path) -> None:
        self._server = server
        self._headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
        self._ssl = ssl.create_default_context(cafile=str(ca_file))
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> KubeApi:
        self._session = aiohttp.ClientSession(
            headers=self._headers,
            connector=aiohttp.TCPConnector(ssl=self._ssl, limit=32),
        )
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._session is not None:
            await self._session.close()

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            raise RuntimeError("KubeApi used outside `async with`")
        return self._session

    async def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        content_type: str = "application/json",
        params: dict[str, str] | None = None,
    ) -> Any:
        """Send one request; returns the decoded JSON answer, raises :class:`ApiError`."""
        data = None if body is None else json.dumps(body)
        headers = {"Content-Type": content_type} if data is not None else {}
        async with self.session.request(
            method,
            self._server + path,
            data=data,
            headers=headers,
            params=params,
            timeout=aiohttp.ClientTimeout(total=30),
        ) as response:
            text = await response.text()
            if response.status >= 400:
                raise ApiError(response.status, method, path, text)
            return json.loads(text) if text else None

    async def get(self, path: str, params: dict[str, str] | None = None) -> Any:
        return await self.request("GET", path, params=params)

    async def watch(
        self, path: str, resource_version: str, params: dict[str, str] | None = None
    ) -> AsyncIterator[dict[str, Any]]:
        """Yield watch events from ``resource_version`` until the server closes the stream."""
        query = dict(params or {})
        query.update(
            {
                "watch": "true",
                "resourceVersion": resource_version,
                "allowWatchBookmarks": "true",
                "timeoutSeconds": "240",
            }
        )
        async with self.session.get(
            self._server + path,
            params=query,
            timeout=aiohttp.ClientTimeout(total=None, sock_read=300),
        ) as response:
            if response.status >= 400:
                raise ApiError(response.status, "WATCH", path, await response.text())
            async for line in response.content:
                if line.strip():
                    yield json.loads(line)
