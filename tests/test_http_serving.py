"""How the daemon serves (docs/performance.md, "Daemon"): one send per response through
``CorkedTransport``, reads of warm state on the event loop, blocking work in the thread pool."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx

from creative_memory import MemoryStore
from creative_memory.http import DaemonConfig, ThreadedDaemon
from creative_memory.http.corked import CorkedTransport, corked_protocol
from tests.conftest import tag


class Recorder:
    """A fake transport recording each write."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False
        self.aborted = False

    def write(self, data: bytes) -> None:
        assert not self.closed
        self.writes.append(bytes(data))

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.aborted = self.closed = True

    def get_write_buffer_size(self) -> int:
        return 0

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 1) if name == "peername" else default


def test_writes_of_one_step_are_sent_as_one_in_order() -> None:
    async def main() -> tuple[Recorder, list[int]]:
        raw = Recorder()
        t = CorkedTransport(raw, asyncio.get_running_loop())  # type: ignore[arg-type]
        t.write(b"HTTP/1.1 200 OK\r\n\r\n")
        t.write(memoryview(b"body"))
        t.write(b"")
        sizes = [t.get_write_buffer_size(), len(raw.writes)]
        await asyncio.sleep(0)
        t.writelines([b"more", bytearray(b"!")])
        await asyncio.sleep(0)
        t.write(b"last")
        t.close()  # closing sends what is held first
        t.write(b"after close")
        await asyncio.sleep(0)
        assert t.get_extra_info("peername") == ("127.0.0.1", 1)
        return raw, sizes

    raw, sizes = asyncio.run(main())
    assert sizes == [23, 0]
    assert raw.writes == [b"HTTP/1.1 200 OK\r\n\r\nbody", b"more!", b"last"]
    assert raw.closed


def test_abort_drops_what_is_held() -> None:
    async def main() -> Recorder:
        raw = Recorder()
        t = CorkedTransport(raw, asyncio.get_running_loop())  # type: ignore[arg-type]
        t.write(b"x")
        t.abort()
        await asyncio.sleep(0)
        return raw

    raw = asyncio.run(main())
    assert raw.writes == [] and raw.aborted


def test_the_protocol_is_uvicorns_own() -> None:
    from uvicorn.protocols.http.h11_impl import H11Protocol

    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
    except ImportError:  # pragma: no cover - httptools not installed
        HttpToolsProtocol = H11Protocol  # type: ignore[misc,assignment]
    assert issubclass(corked_protocol(), HttpToolsProtocol)


def test_a_real_socket_answers_whole_responses(tmp_path: Path) -> None:
    """Keep-alive requests over a real socket: each answer complete (status, headers, body),
    the prompt read both cold (in a thread) and warm (on the loop) the same."""
    store = MemoryStore(tmp_path)
    days = [f"2025-01-0{i + 1}T00:00:00.000Z" for i in range(5)]
    store.ingest_signals("default", [tag("airy", ts=d) for d in days])
    store.ingest_signals("default", [tag("neon", "color", "negative", ts=d) for d in days])
    with ThreadedDaemon(DaemonConfig(root=tmp_path, port=0), store=store) as d:
        token = d.daemon.files.token_for("default")
        with httpx.Client(base_url=d.url, headers={"Authorization": f"Bearer {token}"}) as c:
            blocks = [c.get("/api/v1/prompt").text for _ in range(5)]
            big = c.post("/api/v1/prompt", json={"host_prompt": "q" * 300_000})
            health = c.get("/healthz")
        assert d.daemon.warm("default")
    assert len(set(blocks)) == 1 and "airy" in blocks[0] and "neon" in blocks[0]
    assert big.status_code == 200 and big.text.count("q") == 300_000
    assert health.headers["x-frame-options"] == "DENY"
