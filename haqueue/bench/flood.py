"""The hostile-client benchmark: what one flooding connection costs everyone else.

Method (docs/reliability.md, "Hostile clients"): a probe client puts one job at a time
(send, wait for INSERTED, the next), as users' synchronous producers do, and its latency is
taken three times, SAMPLES puts each: idle; while another connection pipelines `stats` and
never reads a reply (issue 11's flood: 20 MB offered); and while another connection
pipelines `stats` as fast as it can and reads every reply (the server never idles). The
server's resident memory is sampled (psutil, by PID) throughout and read once the flooder
has left. Started servers (beanstalkd, haqueue) are measured in the same run.
"""

from __future__ import annotations

import multiprocessing
import os
import socket
import ssl
import threading
import time
from dataclasses import dataclass

import psutil

from haqueue.bench.load import BenchError
from haqueue.bench.report import Latencies, _mib, _table
from haqueue.bench.servers import started

SAMPLES = 2000
FLOOD_BYTES = 20_000_000
PUT = b"put 0 0 60 5\r\nhello\r\n"


class Flood:
    """One connection sending `command` repeated (`total` bytes) from a thread, never reading.

    With read=True a second thread reads and discards every reply as fast as it can (a
    heavy but well-behaved client). Progress in .sent; .error is what ended it early.
    """

    def __init__(self, host: str, port: int, command: bytes = b"stats\r\n", total: int = FLOOD_BYTES,
                 tls: ssl.SSLContext | None = None, read: bool = False) -> None:
        sock = socket.create_connection((host, port), timeout=5)
        if tls is not None:
            sock = tls.wrap_socket(sock, server_hostname=host)
        sock.settimeout(0.2)
        self.sock = sock
        self.payload = command * (total // len(command))
        self.sent = 0
        self.received = 0
        self.last_progress = time.monotonic()
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._send, daemon=True)]
        if read:
            self._threads.append(threading.Thread(target=self._read, daemon=True))

    def start(self) -> "Flood":
        for thread in self._threads:
            thread.start()
        return self

    def _send(self) -> None:
        view = memoryview(self.payload)
        try:
            while not self._stop.is_set():
                if self.sent >= len(self.payload):
                    if len(self._threads) == 1:
                        return
                    self.sent = 0  # a reading flood goes on until stopped
                try:
                    n = self.sock.send(view[self.sent:self.sent + 65536])
                except (socket.timeout, ssl.SSLWantWriteError):
                    continue
                self.sent += n
                self.last_progress = time.monotonic()
        except OSError as exc:  # the server closed it (output limit)
            self.error = exc

    def _read(self) -> None:
        try:
            while not self._stop.is_set():
                try:
                    data = self.sock.recv(1 << 20)
                except (socket.timeout, ssl.SSLWantReadError):
                    continue
                if not data:
                    return
                self.received += len(data)
        except OSError as exc:
            self.error = exc

    @property
    def done(self) -> bool:
        return self.sent >= len(self.payload)

    def stalled_for(self) -> float:
        return time.monotonic() - self.last_progress

    def close(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(5)
        try:
            self.sock.close()
        except OSError:
            pass


def _flood_in_child(host: str, port: int, read: bool, started, stop) -> None:
    # The flooder shares the load generator's CPU with the probe. At normal
    # priority a busy flooding thread holds that CPU for a scheduler slice (ms)
    # while the probe's reply waits in its socket, and the figures charge the
    # server for the client machine's scheduling. SCHED_IDLE (inherited by the
    # flood's threads) lets the probe run the moment its reply arrives; the
    # server sees the same flood, since the flooder still has the CPU whenever
    # the probe waits.
    os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    flood = Flood(host, port, read=read).start()
    started.set()
    stop.wait()
    flood.close()


class FloodProcess:
    """A Flood run in a child process of its own, for the benchmark.

    In the measuring process its threads would share an interpreter lock with
    the probe: a reading flood's thread, busy with a megabyte of replies, held
    up the probe's own wakeups, and the figures blamed the server for the
    client's lock. A context manager: the flood runs inside the block.
    """

    def __init__(self, host: str, port: int, read: bool = False) -> None:
        context = multiprocessing.get_context("spawn")
        self._started, self._stop = context.Event(), context.Event()
        self._process = context.Process(target=_flood_in_child, daemon=True,
                                        args=(host, port, read, self._started, self._stop))

    def __enter__(self) -> "FloodProcess":
        self._process.start()
        if not self._started.wait(30):
            self.__exit__()
            raise BenchError("the flooding process did not start within 30 s")
        return self

    def __exit__(self, *exc_info) -> None:
        self._stop.set()
        self._process.join(10)
        if self._process.is_alive():
            self._process.kill()
            self._process.join()


class RssSampler:
    """Samples a process's resident set every `period` seconds in a thread; .peak, .last."""

    def __init__(self, pid: int, period: float = 0.05) -> None:
        self.process = psutil.Process(pid)
        self.period = period
        self.peak = self.last = self.process.memory_info().rss
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> "RssSampler":
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        while not self._stop.wait(self.period):
            try:
                self.last = self.process.memory_info().rss
            except psutil.Error:
                return
            self.peak = max(self.peak, self.last)


@dataclass
class FloodResult:
    server: str
    idle: dict
    unread: dict
    reading: dict
    rss_idle: int
    rss_peak: int
    rss_after: int


def _probe(sock: socket.socket, samples: int) -> dict:
    latencies = Latencies()
    buf = b""
    for _ in range(samples):
        t0 = time.perf_counter_ns()
        sock.sendall(PUT)
        while b"\r\n" not in buf:
            chunk = sock.recv(4096)
            if not chunk:
                raise BenchError("the server closed the probe connection")
            buf += chunk
        line, _, buf = buf.partition(b"\r\n")
        latencies.add(time.perf_counter_ns() - t0)
        if not line.startswith(b"INSERTED "):
            raise BenchError(f"probe put: unexpected reply {line[:60]!r}")
    return latencies.summary()


def measure_flood(host: str, port: int, pid: int, server: str = "", samples: int = SAMPLES) -> FloodResult:
    """The probe's put latency idle, under an unread flood, under a reading flood; RSS."""
    process = psutil.Process(pid)
    with socket.create_connection((host, port), timeout=10) as probe:
        probe.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        _probe(probe, samples // 4)  # warm up
        rss_idle = process.memory_info().rss
        with RssSampler(pid) as rss:
            idle = _probe(probe, samples)
            for read in (False, True):
                with FloodProcess(host, port, read=read):
                    during = _probe(probe, samples)
                if read:
                    reading = during
                else:
                    unread = during
        time.sleep(1.0)  # let the server see the flooders go
        return FloodResult(server, idle, unread, reading, rss_idle, rss.peak, process.memory_info().rss)


def flood_servers(kinds: list[str], samples: int = SAMPLES, repeat: int = 1) -> list[FloodResult]:
    """Each kind started afresh for each run, the kinds taking turns (`repeat` runs each)."""
    results = []
    for run in range(repeat):
        for kind in kinds:
            with started(kind) as srv:
                results.append(measure_flood(srv.host, srv.port, srv.pid, _run_name(kind, run, repeat), samples))
    return results


def flood_cluster(config_path: str, samples: int = SAMPLES, repeat: int = 1,
                  timeout: float = 10.0) -> list[FloodResult]:
    """The leader of the running cluster in `config_path` (`haqueue up` prints one), `repeat` times."""
    from haqueue.bench.cluster import find_leader

    results = []
    for run in range(repeat):
        leader, size = find_leader(config_path, timeout)
        pid = listening_pid(leader.client_port)
        name = _run_name(f"haqueue {size}-node leader", run, repeat)
        results.append(measure_flood(leader.address, leader.client_port, pid, name, samples))
    return results


def _run_name(server: str, run: int, repeat: int) -> str:
    return server if repeat == 1 else f"{server} #{run + 1}"


def listening_pid(port: int) -> int:
    """The PID of the process on this machine listening on TCP `port` (for its RSS)."""
    for process in psutil.process_iter():
        try:
            # psutil 6 renamed connections() to net_connections()
            sockets = getattr(process, "net_connections", process.connections)(kind="tcp")
        except psutil.Error:
            continue
        if any(s.status == psutil.CONN_LISTEN and s.laddr.port == port for s in sockets):
            return process.pid
    raise BenchError(f"no process on this machine listens on port {port}: "
                     "bench flood reads the leader's memory by PID, so the cluster must run here")


def format_flood(results: list[FloodResult]) -> str:
    header = ["server", "idle p50", "idle p99", "unread-flood p99", "x idle", "reading-flood p99",
              "x idle", "RSS idle", "RSS peak", "RSS after"]
    rows = []
    for r in results:
        rows.append([
            r.server, f"{r.idle['p50']:.3f} ms", f"{r.idle['p99']:.3f} ms",
            f"{r.unread['p99']:.3f} ms", f"{r.unread['p99'] / r.idle['p99']:.2f}",
            f"{r.reading['p99']:.3f} ms", f"{r.reading['p99'] / r.idle['p99']:.2f}",
            _mib(r.rss_idle), _mib(r.rss_peak), _mib(r.rss_after),
        ])
    return ("flood: a synchronous client's put latency, idle and while another connection floods "
            "`stats`\n" + _table(header, rows))
