"""What bounds every HTTP request of a run's fetch, below httpx: a deadline, a rate floor, and the addresses
a connection may go to (run.run_http's network backend).

httpx's timeouts are per socket operation, so a server that sends one byte a
second never trips them, in the headers or in the body. Here every read and
connect of a request is clipped to the request's deadline, and the time spent
waiting on the server is counted: each `window` seconds of waiting must bring
at least `min_rate * window` bytes. A request that breaks either rule fails
with SlowTransfer (run.run_http adds the URL).

Every connection is made to an address resolved and checked here (the address
connected to is the one checked, so a second DNS answer cannot slip past):
loopback, link-local and unspecified addresses (IPv4-mapped ones included) are
refused unless the run's own URL names such a host (`localhost` or a literal
address of those kinds), so a run published on the internet cannot point a
node's fetches, by a redirect or by its DNS, at the node's own machine.
"""

from __future__ import annotations

import ipaddress
import socket
import ssl
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import httpcore

from p2paudit.errors import InputError

Resolver = Callable[[str, int], list[str]]  # (host, port) -> the IP addresses to try, in order


@dataclass(frozen=True)
class TransferLimits:
    """How long a request may take and how slowly it may arrive; where redirects may go."""

    connect_timeout: float = 10.0  # seconds to open a connection
    read_timeout: float = 60.0  # seconds without a byte; also the window the rate floor is averaged over
    deadline: float = 3600.0  # seconds for one request, from its start to its last byte
    min_rate: float = 1024.0  # bytes per second of waiting, averaged over each read_timeout window
    other_hosts: bool = False  # redirects may leave the run's scheme-host-port origin (the scheme never changes)


class SlowTransfer(InputError):
    """A request ran past its deadline or under the rate floor (one line, without the URL)."""


class RefusedAddress(InputError):
    """A connection would go to an address this fetch may not reach (one line)."""


class Budget:
    """The clock of the request in progress: started by run.run_http before each request, read by every
    read and connect on its connections (one request at a time per client)."""

    def __init__(self, limits: TransferLimits) -> None:
        self.limits = limits
        self.start()

    def start(self) -> None:
        self.began = time.monotonic()
        self.received = 0
        self.window_bytes = 0
        self.window_waited = 0.0
        self.silent = 0.0  # seconds waited since the last byte

    def timeout(self, wanted: float | None) -> float:
        """The timeout of the next socket operation: `wanted`, clipped to the deadline and the rate window."""
        left = self.limits.deadline - (time.monotonic() - self.began)
        if left <= 0:
            raise SlowTransfer(self._late())
        quiet_left = self.limits.read_timeout - self.silent  # the rate window closes on a read that brings bytes
        return max(0.001, min(wanted if wanted is not None else left, left, quiet_left))

    def waited(self, seconds: float, got: int) -> None:
        """Count one read: `seconds` waited for `got` bytes. SlowTransfer when the request breaks a rule."""
        self.received += got
        self.window_bytes += got
        self.window_waited += seconds
        self.silent = 0.0
        if time.monotonic() - self.began >= self.limits.deadline:
            raise SlowTransfer(self._late())
        if self.window_waited >= self.limits.read_timeout:
            window, got_bytes = self.window_waited, self.window_bytes
            self.window_bytes, self.window_waited = 0, 0.0
            if got_bytes < self.limits.min_rate * window:
                raise SlowTransfer(
                    f"{got_bytes} bytes in {window:.3g} s of waiting, under the floor of "
                    f"{self.limits.min_rate:g} bytes/s (too slow; cut off after {self.received} bytes, kept to resume)"
                )

    def timed_out(self, seconds: float) -> None:
        """A read waited `seconds` and timed out (clipped to the deadline or to what silence had left): the
        SlowTransfer that says which."""
        self.window_waited += seconds
        self.silent += seconds
        if time.monotonic() - self.began >= self.limits.deadline:
            raise SlowTransfer(self._late())
        raise SlowTransfer(f"no data for {self.silent:.3g} s after {self.received} bytes (timed out; kept to resume)")

    def _late(self) -> str:
        return (
            f"not done within the deadline of {self.limits.deadline:g} s "
            f"(cut off after {self.received} bytes, kept to resume)"
        )


def is_local_host(host: str) -> bool:
    """Whether a URL's host names this machine or its link: `localhost`, or a loopback, link-local or
    unspecified literal address (a run served from there may be fetched from there)."""
    name = host.strip("[]").lower().rstrip(".")
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return refused_kind(ipaddress.ip_address(name)) is not None
    except ValueError:
        return False


def refused_kind(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str | None:
    """'loopback', 'link-local' or 'unspecified' when `ip` is one (IPv4-mapped IPv6 as its IPv4), else None."""
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if ip.is_loopback:
        return "loopback"
    if ip.is_link_local:
        return "link-local"
    if ip.is_unspecified or (isinstance(ip, ipaddress.IPv4Address) and ip in _THIS_NETWORK):
        return "unspecified"
    return None


_THIS_NETWORK = ipaddress.ip_network("0.0.0.0/8")  # "this host on this network": Linux connects 0.0.0.0 locally


def system_resolver(host: str, port: int) -> list[str]:
    """The host's addresses as the system resolves them (a literal address is itself)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        raise httpcore.ConnectError(f"{host}: cannot resolve: {exc}") from None
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


class GuardedBackend(httpcore.NetworkBackend):
    """httpcore's synchronous backend, with each connection's address checked and each stream timed."""

    def __init__(self, budget: Budget, allow_local: bool, resolve: Resolver = system_resolver) -> None:
        self.budget = budget
        self.allow_local = allow_local
        self.resolve = resolve
        self.inner = httpcore.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.NetworkStream:
        addresses = self.resolve(host, port)
        allowed = [a for a in addresses if self.allow_local or _kind(a) is None]
        if not allowed:
            shown = ", ".join(f"{a} ({_kind(a)})" for a in addresses[:4]) or "no address"
            raise RefusedAddress(
                f"{host} resolves to {shown}: refused, the run's own URL is not on this machine or its link"
            )
        error: Exception | None = None
        for address in allowed:
            try:
                stream = self.inner.connect_tcp(
                    address, port, self.budget.timeout(timeout), local_address, socket_options
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                error = exc
                continue
            return GuardedStream(stream, self.budget)
        raise error if error is not None else RefusedAddress(f"{host}: no address to connect to")

    def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.NetworkStream:
        raise RefusedAddress("unix sockets are not used for runs")

    def sleep(self, seconds: float) -> None:
        self.inner.sleep(seconds)


def _kind(address: str) -> str | None:
    try:
        return refused_kind(ipaddress.ip_address(address.split("%", 1)[0]))
    except ValueError:
        return "unparsable"


class GuardedStream(httpcore.NetworkStream):
    """A connection whose reads and writes are clipped to the request's deadline and counted for its rate."""

    def __init__(self, inner: httpcore.NetworkStream, budget: Budget) -> None:
        self.inner = inner
        self.budget = budget

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        began = time.monotonic()
        try:
            data = self.inner.read(max_bytes, self.budget.timeout(timeout))
        except httpcore.ReadTimeout:
            self.budget.timed_out(time.monotonic() - began)
        self.budget.waited(time.monotonic() - began, len(data))
        return data

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self.inner.write(buffer, self.budget.timeout(timeout))

    def close(self) -> None:
        self.inner.close()

    def start_tls(
        self, ssl_context: ssl.SSLContext, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.NetworkStream:
        tls = self.inner.start_tls(ssl_context, server_hostname, self.budget.timeout(timeout))
        return GuardedStream(tls, self.budget)

    def get_extra_info(self, info: str) -> object:
        return self.inner.get_extra_info(info)
