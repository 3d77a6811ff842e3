"""Egress proxy overhead on loopback: throughput through a CONNECT tunnel vs direct, and the latency a CONNECT adds.

Targets (egress issue): proxy/direct throughput >= 0.8 (median of the per-round ratios); added connect
latency p95 <= 5 ms.

Separate processes, as deployed: the upstream server, the proxy (``EgressProxy`` in its own process, as in the
controller) and the client (this process). The client and the server are the same code on every side (asyncio,
raw sockets, 1 MiB reads); the only difference is whether the client first sends ``CONNECT``.

* throughput: ``--rounds`` rounds of a ``--mib`` MiB download, the sides in a rotating order: (A) through the
  proxy, (B) direct, and (C) through a *reference* forwarder -- the least a CONNECT proxy can do: a blocking
  ``os.splice`` loop per direction on its own thread, no checks, 1 MiB pipes. C/B is what one more TCP hop
  costs on this machine whatever the proxy does; A/C is what is left for the proxy to win. Printed: MB/s p50
  per side, the per-round ratios and their medians.
* latency: ``--connects`` interleaved connects: (A) TCP connect to the proxy + ``CONNECT`` + its ``200`` (the
  proxy connects to the server in between), (B) a TCP connect to the server; p50/p95 of each and the p95 of
  the per-round differences A - B.

``--in-process`` runs the proxy on this process's event loop instead (client, proxy and their bytes on one
thread: the pessimistic case); ``--copy`` makes the proxy copy through user space instead of ``os.splice``.
Not a test: it prints figures, and a summary line at the end.

    .venv/bin/python benchmarks/egress_proxy.py [--rounds 7] [--mib 64] [--connects 200] [--in-process] [--copy]
        [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import fcntl
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable

from options import parse

from orchestrator.egress import Allowlist, EgressProxy, EgressRoute, Resolver

READ_SIZE = 1 << 20
SEND_CHUNK = 1 << 20
THROUGHPUT_TARGET = 0.8
LATENCY_TARGET_MS = 5.0


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


# -- the child processes
async def serve_upstream() -> None:
    """On each connection: read ``<n>\\n``, send n bytes, close. An empty line (or EOF): just close."""
    loop = asyncio.get_running_loop()
    payload = memoryview(bytes(SEND_CHUNK))

    async def handle(conn: socket.socket) -> None:
        try:
            line = b""
            while not line.endswith(b"\n"):
                chunk = await loop.sock_recv(conn, 64)
                if not chunk:
                    return
                line += chunk
            left = int(line.strip() or 0)
            while left > 0:
                n = min(left, SEND_CHUNK)
                await loop.sock_sendall(conn, payload[:n])
                left -= n
        except OSError:
            pass
        finally:
            conn.close()

    listener = socket.create_server(("127.0.0.1", 0), backlog=512)
    listener.setblocking(False)
    print(listener.getsockname()[1], flush=True)
    tasks: set[asyncio.Task[None]] = set()
    while True:
        conn, _ = await loop.sock_accept(listener)
        conn.setblocking(False)
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        task = loop.create_task(handle(conn))
        tasks.add(task)
        task.add_done_callback(tasks.discard)


async def start_proxy(use_splice: bool) -> tuple[EgressProxy, int]:
    proxy = EgressProxy(
        lambda record: None,
        resolver=Resolver(denied=(), deny_local=False),
        max_connections_per_listener=1024,
        use_splice=use_splice,
    )
    route = EgressRoute("bench", Allowlist(["127.0.0.1:*"]))
    listener = socket.create_server(("127.0.0.1", 0), backlog=512)
    handle = await proxy.add_listener(listener, lambda peer: route)
    return proxy, handle.port


async def serve_proxy(use_splice: bool) -> None:
    proxy, port = await start_proxy(use_splice)
    print(port, flush=True)
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, sys.stdin.read)  # until the parent closes our stdin
    await proxy.close()


def serve_reference() -> None:
    """The reference forwarder: CONNECT 127.0.0.1:port, then a blocking splice loop per direction."""

    def pump(src: socket.socket, dst: socket.socket) -> None:
        read_fd, write_fd = os.pipe()
        with contextlib.suppress(OSError):
            fcntl.fcntl(write_fd, fcntl.F_SETPIPE_SZ, 1 << 20)
        try:
            while n := os.splice(src.fileno(), write_fd, 1 << 20, flags=os.SPLICE_F_MOVE):
                while n:
                    n -= os.splice(read_fd, dst.fileno(), n, flags=os.SPLICE_F_MOVE)
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        finally:
            os.close(read_fd)
            os.close(write_fd)

    def handle(client: socket.socket) -> None:
        head = b""
        while not head.endswith(b"\r\n\r\n"):
            head += client.recv(1)
        port = int(head.split()[1].rsplit(b":", 1)[1])
        upstream = socket.create_connection(("127.0.0.1", port))
        client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
        other = threading.Thread(target=pump, args=(client, upstream))
        other.start()
        pump(upstream, client)
        other.join()
        client.close()
        upstream.close()

    listener = socket.create_server(("127.0.0.1", 0), backlog=512)
    print(listener.getsockname()[1], flush=True)
    while True:
        client, _ = listener.accept()
        threading.Thread(target=handle, args=(client,), daemon=True).start()


# -- the client
async def open_tcp(port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setblocking(False)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
    return sock


async def open_tunnel(proxy_port: int, upstream_port: int) -> socket.socket:
    loop = asyncio.get_running_loop()
    sock = await open_tcp(proxy_port)
    await loop.sock_sendall(sock, f"CONNECT 127.0.0.1:{upstream_port} HTTP/1.1\r\n\r\n".encode())
    answer = b""
    while not answer.endswith(b"\r\n\r\n"):
        chunk = await loop.sock_recv(sock, 1024)
        if not chunk:
            raise RuntimeError(f"the proxy closed: {answer!r}")
        answer += chunk
    if not answer.startswith(b"HTTP/1.1 200"):
        raise RuntimeError(f"the proxy refused: {answer!r}")
    return sock


async def download(sock: socket.socket, size: int, buf: bytearray) -> float:
    """Ask for ``size`` bytes and read them all: MB/s."""
    loop = asyncio.get_running_loop()
    view = memoryview(buf)
    t0 = time.perf_counter()
    await loop.sock_sendall(sock, f"{size}\n".encode())
    got = 0
    while True:
        n = await loop.sock_recv_into(sock, view)
        if not n:
            break
        got += n
    elapsed = time.perf_counter() - t0
    sock.close()
    if got != size:
        raise RuntimeError(f"got {got} bytes of {size}")
    return size / elapsed / 1e6


async def throughput(
    args: argparse.Namespace, sides: dict[str, Callable[[], Awaitable[float]]]
) -> dict[str, list[float]]:
    names = list(sides)
    for name in names:  # warm-up
        await sides[name]()
    samples: dict[str, list[float]] = {name: [] for name in names}
    for i in range(args.rounds):
        order = names[i % len(names) :] + names[: i % len(names)]
        for name in order:
            samples[name].append(await sides[name]())
    return samples


async def latency(args: argparse.Namespace, proxy_port: int, upstream: int) -> tuple[list[float], list[float]]:
    loop = asyncio.get_running_loop()

    async def tunnel_ms() -> float:
        t0 = time.perf_counter()
        sock = await open_tunnel(proxy_port, upstream)
        elapsed = (time.perf_counter() - t0) * 1000
        await loop.sock_sendall(sock, b"\n")
        sock.close()
        return elapsed

    async def tcp_ms() -> float:
        t0 = time.perf_counter()
        sock = await open_tcp(upstream)
        elapsed = (time.perf_counter() - t0) * 1000
        await loop.sock_sendall(sock, b"\n")
        sock.close()
        return elapsed

    for _ in range(10):  # warm-up
        await tunnel_ms()
        await tcp_ms()
    la: list[float] = []
    lb: list[float] = []
    for i in range(args.connects):
        if i % 2 == 0:
            la.append(await tunnel_ms())
            lb.append(await tcp_ms())
        else:
            lb.append(await tcp_ms())
            la.append(await tunnel_ms())
    return la, lb


async def amain(args: argparse.Namespace) -> int:
    children: list[subprocess.Popen[str]] = []

    def spawn(mode: str) -> int:
        cmd = [sys.executable, __file__, mode, *(["--copy"] if args.copy else [])]
        child = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        children.append(child)
        assert child.stdout is not None
        return int(child.stdout.readline())

    proxy: EgressProxy | None = None
    try:
        upstream = spawn("--serve-upstream")
        if args.in_process:
            proxy, proxy_port = await start_proxy(not args.copy)
        else:
            proxy_port = spawn("--serve-proxy")
        reference = spawn("--serve-reference") if hasattr(os, "splice") else None
        where = "this process" if args.in_process else "its own process"
        path = "user-space copy" if args.copy else "os.splice"
        print(f"proxy in {where}, data path {path}; load {os.getloadavg()[0]:.2f} on {os.cpu_count()} cpus")
        buf = bytearray(READ_SIZE)
        size = args.mib << 20

        sides: dict[str, Callable[[], Awaitable[float]]] = {}

        async def through() -> float:
            return await download(await open_tunnel(proxy_port, upstream), size, buf)

        async def direct() -> float:
            return await download(await open_tcp(upstream), size, buf)

        sides = {"A": through, "B": direct}
        if reference is not None:
            reference_port = reference

            async def minimal() -> float:
                return await download(await open_tunnel(reference_port, upstream), size, buf)

            sides["C"] = minimal
        samples = await throughput(args, sides)
        a, b = samples["A"], samples["B"]
        ratios = [x / y for x, y in zip(a, b, strict=True)]
        ratio = statistics.median(ratios)
        verdict = "meets" if ratio >= THROUGHPUT_TARGET else "MISSES"
        print(f"throughput, {args.mib} MiB x {args.rounds} rounds (sides in rotating order)")
        labels = {"A": "through the proxy", "B": "direct", "C": "reference forwarder"}
        for name, values in samples.items():
            line = f"p50 {pct(values, 0.5):6.0f} MB/s   min {min(values):6.0f}   max {max(values):6.0f}"
            print(f"  ({name}) {labels[name]:20} {line}")
        print(f"  A/B per round: {' '.join(f'{r:.2f}' for r in ratios)}; median {ratio:.3f} ({verdict} >= 0.8)")
        summary: dict[str, float | str] = {"proxy/direct throughput": round(ratio, 3)}
        if "C" in samples:
            c = samples["C"]
            cb = statistics.median(x / y for x, y in zip(c, b, strict=True))
            ac = statistics.median(x / y for x, y in zip(a, c, strict=True))
            print(f"  C/B median {cb:.3f} (one more hop, whatever forwards it); A/C median {ac:.3f}")
            summary["reference/direct throughput"] = round(cb, 3)
            summary["proxy/reference throughput"] = round(ac, 3)

        la, lb = await latency(args, proxy_port, upstream)
        added = [x - y for x, y in zip(la, lb, strict=True)]
        added_p95 = pct(added, 0.95)
        verdict = "meets" if added_p95 <= LATENCY_TARGET_MS else "MISSES"
        print(f"connect latency, {args.connects} connects (interleaved)")
        print(f"  (A) CONNECT + 200      p50 {pct(la, 0.5):6.3f} ms   p95 {pct(la, 0.95):6.3f} ms")
        print(f"  (B) direct TCP connect p50 {pct(lb, 0.5):6.3f} ms   p95 {pct(lb, 0.95):6.3f} ms")
        print(f"  added (A - B)          p50 {pct(added, 0.5):6.3f} ms   p95 {added_p95:6.3f} ms ({verdict} <= 5 ms)")
        summary |= {
            "proxy MB/s p50": round(pct(a, 0.5)),
            "direct MB/s p50": round(pct(b, 0.5)),
            "added connect p50 ms": round(pct(added, 0.5), 3),
            "added connect p95 ms": round(added_p95, 3),
            "proxy": "in-process" if args.in_process else "own process",
            "data path": path,
        }
        print(f"egress summary: {json.dumps(summary)}")
    finally:
        if proxy is not None:
            await proxy.close()
        for child in children:
            with contextlib.suppress(OSError):
                assert child.stdin is not None
                child.stdin.close()
            if child.poll() is None:
                child.terminate()
            child.wait(timeout=10)
    return 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=7, help="throughput rounds")
    parser.add_argument("--mib", type=int, default=64, help="MiB per transfer")
    parser.add_argument("--connects", type=int, default=200, help="interleaved connects for the latency")
    parser.add_argument("--in-process", action="store_true", help="run the proxy on this process's loop")
    parser.add_argument("--copy", action="store_true", help="the proxy copies through user space (no os.splice)")
    parser.add_argument("--serve-upstream", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--serve-proxy", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--serve-reference", action="store_true", help=argparse.SUPPRESS)
    args = parse(parser, {"rounds": 1, "mib": 4, "connects": 10})
    if args.serve_upstream:
        asyncio.run(serve_upstream())
    elif args.serve_proxy:
        asyncio.run(serve_proxy(not args.copy))
    elif args.serve_reference:
        serve_reference()
    else:
        raise SystemExit(asyncio.run(amain(args)))


if __name__ == "__main__":
    main()
