"""Issue 23, the connection rows, against the real `compacting-proxy` process on loopback: probes
answered while slow bodies hold the connection cap, slow bodies cut by a minimum rate only under load
(row 5), pipelined requests nobody reads kept from filling the memory (row 6), and `--workers N`
(each worker its own cap), and issue 35's rows 9, 12 and 4 (a slow reader within the send timeout).
Socket counts are kept modest: the cap is lowered through its setting.
"""

from __future__ import annotations

import json
import re
import resource
import socket
import statistics
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.support.fakes import completion
from tests.support.health import RSS_GROWTH_LIMIT_KB, less_cpu_waits
from tests.support.hostile import ScriptedHandler, Seen, hostile_upstream
from tests.support.hostile import proxy_for as hostile_proxy
from tests.support.processes import VENV_BIN, free_port, running

CHAT = b'{"model": "stub", "messages": [{"role": "user", "content": "hello there, a slow upload"}]}'
PROBES = ("/healthz", "/readyz", "/metrics")


@dataclass
class Proxy:
    process: subprocess.Popen[bytes]
    port: int

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def rss_kb(self) -> int:
        status = Path(f"/proc/{self.process.pid}/status").read_text()
        return int(re.search(r"^VmRSS:\s+(\d+) kB", status, re.M).group(1))  # type: ignore[union-attr]


@pytest.fixture(scope="module")
def stub() -> Iterator[str]:
    """The project's stub model server, as the upstream (it answers chats and `/v1/models`)."""
    port = free_port()
    args = [str(VENV_BIN / "python"), "-m", "proxy.stub", "--port", str(port)]
    with running(args, ready_url=f"http://127.0.0.1:{port}/v1/models"):
        yield f"http://127.0.0.1:{port}/v1"


@contextmanager
def proxy_for(upstream_url: str, *args: str, **env: str) -> Iterator[Proxy]:
    port = free_port()
    command = [str(VENV_BIN / "compacting-proxy"), "--port", str(port), "--no-access-log", *args]
    environment = {"COMPACT_UPSTREAM_URL": upstream_url, "COMPACT_WINDOW": "8192", **env}
    with running(command, ready_url=f"http://127.0.0.1:{port}/healthz", env=environment) as process:
        yield Proxy(process, port)


def port_of(proxy: Proxy) -> int:
    return proxy.port


def chat_head(length: int = len(CHAT)) -> bytes:
    return (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: p\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n" % length
    )


def probe_latency(port: int, path: str, pid: int | None = None) -> tuple[int, float]:
    """A probe as the kubelet sends it (a new connection, `Connection: close`): status and seconds,
    less the waits for a CPU of the threads it needed when the proxy's `pid` is given."""
    status = 0

    def probe() -> float:
        nonlocal status
        asked = time.monotonic()
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            sock.sendall(b"GET %s HTTP/1.1\r\nHost: p\r\nConnection: close\r\n\r\n" % path.encode())
            answer = b""
            while chunk := sock.recv(65536):
                answer += chunk
        status = int(answer.split(b" ", 2)[1])
        return time.monotonic() - asked

    seconds = probe() if pid is None else less_cpu_waits(pid, probe)[1]
    return status, seconds


@contextmanager
def sockets(port: int, count: int) -> Iterator[list[socket.socket]]:
    opened = [socket.create_connection(("127.0.0.1", port)) for _ in range(count)]
    try:
        yield opened
    finally:
        for sock in opened:
            sock.close()


def has_answer(sock: socket.socket) -> bool:
    """Whether the proxy has written or hung up, without taking what it wrote."""
    try:
        sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
        return True
    except BlockingIOError:
        return False
    except OSError:
        return True


def answer_of(sock: socket.socket, timeout: float) -> bytes:
    """What the proxy wrote until it closed the connection, or until `timeout` passes."""
    sock.settimeout(timeout)
    answer = b""
    with suppress(TimeoutError, OSError):
        while chunk := sock.recv(65536):
            answer += chunk
    return answer


# --- 5: probes answered while trickling bodies hold the cap; a minimum body rate under load ------


@pytest.mark.process
@pytest.mark.slow
def test_5_probes_answer_while_trickling_bodies_hold_the_cap_and_the_bodies_are_cut(stub: str) -> None:
    cap = 50
    limits = {"COMPACT_MAX_CLIENT_CONNECTIONS": str(cap), "COMPACT_MIN_BODY_RATE_GRACE": "2"}
    with proxy_for(stub, **limits) as proxy:
        port = port_of(proxy)
        idle = [probe_latency(port, "/healthz", proxy.process.pid)[1] for _ in range(20)]
        noise = max(idle)
        with sockets(port, cap) as trickling:
            for sock in trickling:  # a whole head, then a byte now and then: 1,000 bytes announced
                sock.sendall(chat_head(1000) + b"{")
            time.sleep(0.3)
            with socket.create_connection(("127.0.0.1", port)) as chat:  # the cap is reached
                chat.sendall(chat_head() + CHAT)
                assert answer_of(chat, 5).startswith(b"HTTP/1.1 503 "), "the cap was not reached"
            during: list[float] = []
            for _ in range(5):
                for path in PROBES:
                    status, seconds = probe_latency(port, path, proxy.process.pid)
                    assert status == 200, (path, status)
                    during.append(seconds)
            assert max(during) < 0.05 + noise, (max(during), statistics.median(idle), noise)
            started = time.monotonic()
            while time.monotonic() - started < 6:  # a byte a second: far under 240 B/s
                for sock in trickling:
                    with suppress(OSError):
                        sock.send(b" ")
                if all(has_answer(sock) for sock in trickling):
                    break
                time.sleep(1)
            cut = time.monotonic() - started
            answers = [answer_of(sock, 1) for sock in trickling]
            assert sum(a.startswith(b"HTTP/1.1 408 ") for a in answers) == cap, answers[:3]
            assert cut < 5, cut  # the grace (2 s) and a check a second, from the head's end
        reply = httpx.post(proxy.base_url + "/v1/chat/completions", content=CHAT, timeout=10)
        assert reply.status_code == 200, reply.text


@pytest.mark.process
@pytest.mark.slow
def test_5_a_slow_upload_is_served_at_ordinary_load(stub: str) -> None:
    """The issue's legitimate slow upload (a byte every 2 s for 40 s), ten times faster and with the
    grace ten times shorter: far under the minimum rate, and served, since the proxy is not busy."""
    limits = {"COMPACT_MIN_BODY_RATE_GRACE": "0.5", "COMPACT_BODY_TIMEOUT": "3"}
    with proxy_for(stub, **limits) as proxy:
        with socket.create_connection(("127.0.0.1", port_of(proxy))) as sock:
            sock.sendall(chat_head().replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n"))
            for byte in CHAT:  # 5 bytes a second for 17 s would be 85 bytes: here about 4.4 s
                time.sleep(0.05)
                sock.sendall(bytes([byte]))
            answer = answer_of(sock, 10)
        assert answer.startswith(b"HTTP/1.1 200 "), answer[:300]


@pytest.mark.process
def test_5_past_the_cap_a_request_for_another_path_gets_503_and_the_reserve_is_bounded(stub: str) -> None:
    cap = 10
    limits = {"COMPACT_MAX_CLIENT_CONNECTIONS": str(cap), "COMPACT_HEADER_TIMEOUT": "3"}
    with proxy_for(stub, **limits) as proxy:
        port = port_of(proxy)
        with sockets(port, cap) as held, sockets(port, 40) as silent:
            time.sleep(0.3)
            # 40 silent connections past the cap: the oldest are evicted, the probes still get in
            evicted = sum(has_answer(sock) for sock in silent)
            assert evicted >= 40 - 16, evicted
            assert probe_latency(port, "/healthz")[0] == 200
            with socket.create_connection(("127.0.0.1", port)) as chat:
                chat.sendall(chat_head() + CHAT)
                answer = answer_of(chat, 5)
            assert answer.startswith(b"HTTP/1.1 503 "), answer[:200]
            assert b'"code":"overloaded"' in answer and b"connection: close" in answer.lower()
            assert not any(has_answer(sock) for sock in held)


# --- 6: pipelined requests nobody reads are not all parsed at once --------------------------------


@pytest.mark.process
@pytest.mark.slow
def test_6_pipelined_gets_never_read_leave_the_memory_bounded(stub: str) -> None:
    request = b"GET /healthz HTTP/1.1\r\nHost: p\r\n\r\n"
    burst = request * (256 * 1024 // len(request))  # about 7,700 requests
    with proxy_for(stub) as proxy:
        port = port_of(proxy)
        # The idle noise: the second slowest of 20 idle probes, as the busy figure is the second
        # slowest of 10 (one scheduler spike on either side is not the proxy's doing).
        idle = sorted(probe_latency(port, "/healthz", proxy.process.pid)[1] for _ in range(20))[-2]
        before = proxy.rss_kb()
        with sockets(port, 50) as pipelining:
            for sock in pipelining:
                sock.settimeout(2)
                with suppress(OSError):  # the proxy may stop reading: then the kernel's buffers fill
                    sock.sendall(burst)
            time.sleep(2)
            during = proxy.rss_kb()
            # The 50 connections' requests are still being answered (as fast as the kernel takes
            # the answers) while the probes come: a probe is a new connection's request, which
            # never waits behind their pipelined ones (`PipelineTurns`: 127 ms median, 1.3 s at
            # worst before). The time the threads waited for a CPU is not counted (`less_cpu_waits`:
            # on this shared two-core machine the scheduler alone keeps a process off it for
            # 100-200 ms at times), and a second series is allowed.
            series = []
            for _ in range(2):
                probes = [probe_latency(port, "/healthz", proxy.process.pid) for _ in range(10)]
                series.append([round(seconds * 1000) for _, seconds in probes])
                assert all(status == 200 for status, _ in probes)
                if sorted(seconds for _, seconds in probes)[-2] < 0.05 + idle:
                    break
        print(f"RSS {before // 1024} -> {during // 1024} MB; /healthz ms {series}, idle {idle * 1000:.1f} ms")
        assert during - before < RSS_GROWTH_LIMIT_KB, (before, during)
        assert sorted(series[-1])[-2] < 50 + idle * 1000, (series, idle)


@pytest.mark.process
def test_6_pipelined_requests_are_all_answered_in_order(stub: str) -> None:
    """A client that does read: 300 pipelined probes with two chats among them, in one write."""
    with proxy_for(stub) as proxy:
        probe = b"GET /healthz HTTP/1.1\r\nHost: p\r\n\r\n"
        chunked = chat_head().replace(b"Content-Length: %d" % len(CHAT), b"Transfer-Encoding: chunked")
        chunked += b"%x\r\n%s\r\n0\r\n\r\n" % (len(CHAT), CHAT)
        data = probe * 100 + chat_head() + CHAT + probe * 100 + chunked + probe * 100 + b"GET /nowhere"
        data += b" HTTP/1.1\r\nHost: p\r\nConnection: close\r\n\r\n"
        with socket.create_connection(("127.0.0.1", port_of(proxy)), timeout=20) as sock:
            sock.sendall(data)
            answers = b""
            while chunk := sock.recv(65536):
                answers += chunk
        statuses = re.findall(rb"HTTP/1\.1 (\d{3}) ", answers)
        assert statuses[:-1] == [b"200"] * 302 and statuses[-1] != b"200", statuses[-3:]
        assert answers.count(b'"choices"') == 2


# --- --workers N: each worker has its own cap --------------------------------------------------------


@pytest.mark.process
@pytest.mark.slow
def test_workers_each_have_their_own_connection_cap(stub: str) -> None:
    """With `--workers 2` and a cap of 5, between 5 and 10 chats are held open (as the kernel hands
    connections to the workers), and the rest get 503: the cap is per worker, as the README says."""
    with proxy_for(stub, "--workers", "2", COMPACT_MAX_CLIENT_CONNECTIONS="5") as proxy:
        port = proxy.port
        with sockets(port, 30) as held:
            for sock in held:
                sock.sendall(chat_head(1000) + b"{")  # a body that never ends
            time.sleep(1)
            refused = sum(answer_of(sock, 1.0).startswith(b"HTTP/1.1 503 ") for sock in held)
            assert 20 <= refused <= 25, refused
            assert probe_latency(port, "/healthz")[0] == 200


# --- issue 35, row 9: the connection cap within the process's descriptors --------------------------


@contextmanager
def proxy_under_ulimit(upstream_url: str, files: int, **env: str) -> Iterator[Proxy]:
    """The proxy started as a shell with `ulimit -n files` starts it (soft and hard limit alike)."""
    port = free_port()
    command = [str(VENV_BIN / "compacting-proxy"), "--port", str(port), "--no-access-log"]
    shell = ["bash", "-c", f'ulimit -n {files} && exec "$@"', "bash", *command]
    environment = {"COMPACT_UPSTREAM_URL": upstream_url, "COMPACT_WINDOW": "8192", **env}
    with running(shell, ready_url=f"http://127.0.0.1:{port}/healthz", env=environment) as process:
        yield Proxy(process, port)


def own_files(needed: int) -> None:
    """This process's own descriptor limit raised to `needed` (its sockets), or the test skipped."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < needed:
        if hard != resource.RLIM_INFINITY and hard < needed:
            pytest.skip(f"this process may open {hard} files, the test needs {needed}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))


def settled(count: Callable[[], int], quiet: float = 1.5, timeout: float = 30) -> int:
    """`count()` once it has not changed for `quiet` seconds (polled)."""
    last, since, deadline = count(), time.monotonic(), time.monotonic() + timeout
    while time.monotonic() - since < quiet and time.monotonic() < deadline:
        time.sleep(0.2)
        if (now := count()) != last:
            last, since = now, time.monotonic()
    return last


@pytest.mark.slow
def test_9_the_cap_fits_the_descriptors_and_the_overflow_gets_503(stub: str) -> None:
    """`ulimit -n 1024` and 1,100 connections that send half a head and stall: the cap (1,000 by
    default, plus the probe reserve, plus 512 pooled upstream connections) does not fit 1,024
    descriptors, so the proxy sizes it from the limit at start-up; connections past it get 503 at
    once, never a close without a word, and /healthz and a chat on a new connection are answered."""
    stalled_count = 1_100
    own_files(stalled_count + 100)
    with proxy_under_ulimit(stub, 1024) as proxy:
        port = port_of(proxy)
        with sockets(port, stalled_count) as stalled:
            for sock in stalled:
                sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: p\r\n")  # half a head
            settled(lambda: sum(has_answer(sock) for sock in stalled))
            answers = [answer_of(sock, 0.05) if has_answer(sock) else None for sock in stalled]
            refused = [a for a in answers if a is not None]
            assert refused, "every stalled connection was held: the cap did not move"
            silent = [a for a in refused if not a.startswith(b"HTTP/1.1 503 ")]
            assert not silent, f"{len(silent)} of {len(refused)} closed without a 503: {silent[:2]}"
            assert probe_latency(port, "/healthz")[0] == 200
            with socket.create_connection(("127.0.0.1", port)) as chat:
                chat.sendall(chat_head() + CHAT)
                assert answer_of(chat, 5).startswith(b"HTTP/1.1 503 ")
            log = Path(proxy.process.log_path).read_text()  # type: ignore[attr-defined]
            assert "out of system resource" not in log and "Too many open files" not in log, log[-2000:]
            assert "COMPACT_MAX_CLIENT_CONNECTIONS lowered from 1000 to 440" in log, log[-2000:]
        reply = httpx.post(proxy.base_url + "/v1/chat/completions", content=CHAT, timeout=10)
        assert reply.status_code == 200, reply.text


# --- issue 35, row 12: a refused body closes its connection -----------------------------------------


@pytest.mark.parametrize("framing", ["chunked", "length"])
def test_12_a_body_refused_413_closes_the_connection_before_a_pipelined_request(framing: str) -> None:
    """A body over `COMPACT_MAX_BODY_BYTES`, then a second request pipelined behind it on the same
    connection: the client gets the 413 with `connection: close` and the connection ends there, as
    nginx closes after its 413 (the body is not read to its end); the second request never
    reaches the upstream."""
    big = b'{"model": "m", "messages": [{"role": "user", "content": "' + b"x" * 4000 + b'"}]}'
    if framing == "chunked":
        head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: p\r\nTransfer-Encoding: chunked\r\n\r\n"
        body = b"".join(
            b"%x\r\n%s\r\n" % (len(big[i : i + 500]), big[i : i + 500]) for i in range(0, len(big), 500)
        )
        first = head + body + b"0\r\n\r\n"
    else:
        first = chat_head(len(big)) + big
    second = chat_head() + CHAT
    with hostile_upstream() as hostile:
        hostile.routes["/v1/chat/completions"] = lambda h, s: h.json(200, completion("ok"))
        with hostile_proxy(hostile.url, COMPACT_MAX_BODY_BYTES="1000") as proxy:
            with socket.create_connection(("127.0.0.1", int(proxy.base_url.rsplit(":", 1)[1]))) as sock:
                sock.sendall(first + second)
                answers = answer_of(sock, 10)
            assert answers.startswith(b"HTTP/1.1 413 "), answers[:300]
            assert b"connection: close" in answers.lower()
            assert answers.count(b"HTTP/1.1 ") == 1, answers
            httpx.post(proxy.base_url + "/v1/chat/completions", content=CHAT, timeout=10)  # a later one
    chats = [seen for seen in hostile.seen if seen.path == "/v1/chat/completions"]
    assert [seen.body for seen in chats] == [CHAT], "the pipelined request reached the upstream"


# --- issue 35, row 4: an answer its client takes slowly is not cut by the send timeout ---------------


def streamed_answer(size: int) -> Callable[[ScriptedHandler, Seen], None]:
    """A Chat Completions stream of about `size` bytes, written as fast as the proxy takes it."""
    chunk = {
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": {"content": "word " * 200}}],
    }
    event = b"data: " + json.dumps(chunk).encode() + b"\n\n"

    def answer(h: ScriptedHandler, seen: Seen) -> None:
        h.send_response(200)
        h.send_header("content-type", "text/event-stream")
        h.send_header("transfer-encoding", "chunked")
        h.end_headers()
        for _ in range(size // len(event)):
            h.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
        h.wfile.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(DONE), DONE))

    return answer


DONE = b"data: [DONE]\n\n"


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_4_a_slow_reader_of_a_long_streamed_answer_gets_all_of_it_within_the_send_timeout() -> None:
    """3 MB read at 160 KB/s (about 20 s) through a 2 s send timeout: each read moves the answer,
    though the proxy's own buffer stays full for longer than the timeout (the kernel's queue drains
    first): counted from the proxy's buffer alone, this client was cut after 2 s."""
    size, per_read = 3_000_000, 8_000  # every 50 ms
    with hostile_upstream() as hostile:
        hostile.routes["/v1/chat/completions"] = streamed_answer(size)
        with hostile_proxy(hostile.url, COMPACT_WINDOW="100000", COMPACT_SEND_TIMEOUT="2") as proxy:
            body = b'{"model": "m", "stream": true, "messages": [{"role": "user", "content": "hi"}]}'
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            with sock:
                sock.connect(("127.0.0.1", int(proxy.base_url.rsplit(":", 1)[1])))
                sock.sendall(chat_head(len(body)) + body)
                started, received, tail = time.monotonic(), 0, b""
                while not tail.endswith(DONE + b"\r\n0\r\n\r\n") and (piece := sock.recv(per_read)):
                    received, tail = received + len(piece), (tail + piece)[-64:]
                    time.sleep(0.05)
                took = time.monotonic() - started
            log = proxy.log
    print(f"row 4: {received:,} bytes read in {took:.1f} s through a 2 s send timeout")
    assert tail.endswith(DONE + b"\r\n0\r\n\r\n"), f"cut after {received:,} bytes and {took:.1f} s"
    assert received >= size and took > 10
    assert "took no byte" not in log
