"""HTTP GETs of a published run's files under one base URL: bounded, timed out, counted, one line per failure.

httpx over run.http_guard's network backend: every request has a deadline
and a rate floor (a server trickling bytes, in its headers or its body, is
cut off), and every connection goes to a checked address (no loopback,
link-local or unspecified address unless the run's own URL is on this
machine). At most MAX_REDIRECTS redirects, each to the same scheme (https
never falls back to http) and, unless TransferLimits.other_hosts, to the
run's own host and port; no content coding (byte offsets are the file's); no
proxy settings from the environment. Every failure is one line of InputError
naming the URL. run.remote decides what to fetch and checks it; this module
only moves bytes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import httpcore
import httpx

from p2paudit.errors import InputError
from p2paudit.run.http_guard import (
    Budget,
    GuardedBackend,
    RefusedAddress,
    Resolver,
    SlowTransfer,
    TransferLimits,
    is_local_host,
    system_resolver,
)
from p2paudit.run.http_replies import check_length

SCHEMES = ("http", "https")
MAX_REDIRECTS = 5
CONNECT_TIMEOUT = 10.0  # seconds
READ_TIMEOUT = 60.0  # seconds without a byte

# (file path relative to the run, bytes of it present so far, its size if known)
Progress = Callable[[str, int, int | None], None]


@dataclass
class FetchStats:
    """What a fetch cost: bytes received per file (over the network) and files served from the cache."""

    received: dict[str, int] = field(default_factory=dict)
    cached: list[str] = field(default_factory=list)

    @property
    def received_bytes(self) -> int:
        return sum(self.received.values())


def run_base_url(base_url: str) -> httpx.URL:
    """The run's base URL (ending in "/"); InputError (one line) unless it is http(s) with a host."""
    try:
        url = httpx.URL(base_url if base_url.endswith("/") else base_url + "/")
    except (httpx.InvalidURL, TypeError) as exc:
        raise InputError(f"run URL {base_url[:200]!r} is not a URL: {exc}") from None
    if url.scheme not in SCHEMES or not url.host:
        raise InputError(f"run URL {base_url[:200]!r}: want http:// or https:// and a host")
    return url


class _GuardedTransport(httpx.HTTPTransport):
    """httpx's transport over a GuardedBackend (httpx has no argument for a network backend, so the pool it
    made is replaced by one with the same TLS context over ours)."""

    def __init__(self, backend: GuardedBackend) -> None:
        super().__init__(trust_env=False)
        self._pool = httpcore.ConnectionPool(
            ssl_context=httpx.create_ssl_context(trust_env=False), max_connections=4, network_backend=backend
        )


class RunHttp:
    """An HTTP client for the files under `base_url`; `stats` counts the bytes received per file,
    `on_progress` is called as they arrive. Close it (RemoteRun does) to release its connections.
    One request at a time (its Budget times the request in progress)."""

    def __init__(
        self,
        base_url: str,
        on_progress: Progress | None = None,
        connect_timeout: float = CONNECT_TIMEOUT,
        read_timeout: float = READ_TIMEOUT,
        limits: TransferLimits | None = None,
        resolve: Resolver = system_resolver,
    ) -> None:
        url = run_base_url(base_url)
        self.base = url
        self.on_progress = on_progress
        self.limits = limits or TransferLimits(connect_timeout=connect_timeout, read_timeout=read_timeout)
        self.read_timeout = self.limits.read_timeout
        self.stats = FetchStats()
        self.budget = Budget(self.limits)
        self.client = httpx.Client(
            timeout=httpx.Timeout(self.limits.read_timeout, connect=self.limits.connect_timeout),
            follow_redirects=False,  # followed by hand: same scheme (and origin) only, counted
            headers={"Accept-Encoding": "identity"},
            trust_env=False,
            transport=_GuardedTransport(GuardedBackend(self.budget, is_local_host(url.host), resolve)),
        )

    def close(self) -> None:
        self.client.close()

    def url(self, path: str) -> httpx.URL:
        return self.base.join(path)

    def fetch_small(self, path: str, max_bytes: int) -> bytes:
        """The whole of a small file (the manifest, its signature), bounded, never cached."""
        chunks, size = [], 0
        with self.get(path, {}) as (response, url):
            if response.status_code != 200:
                raise InputError(f"{url}: HTTP {response.status_code} {response.reason_phrase}".rstrip())
            check_length(response, url, max_bytes, 0)
            for chunk in self.body(response, url, path):
                size += len(chunk)
                if size > max_bytes:
                    raise InputError(f"{url} sent more than the {max_bytes} bytes allowed")
                chunks.append(chunk)
        return b"".join(chunks)

    def body(self, response: httpx.Response, url: httpx.URL, path: str, start: int = 0) -> Iterator[bytes]:
        """The raw body, counted in stats; a broken or stalled transfer is one line of InputError."""
        coding = response.headers.get("content-encoding", "identity").strip().lower()
        if coding not in ("identity", ""):
            raise InputError(f"{url}: the server sent content coding {coding[:40]!r}, want none (identity)")
        received = start
        try:
            for chunk in response.iter_raw():  # as it arrives: a chunker would lose its buffer on a break
                self.stats.received[path] = self.stats.received.get(path, 0) + len(chunk)
                received += len(chunk)
                yield chunk
        except SlowTransfer as exc:
            raise InputError(f"{url}: {exc}") from None
        except httpx.TimeoutException:
            raise InputError(
                f"{url}: no data for {self.read_timeout:g} s after {received} bytes (timed out; kept to resume)"
            ) from None
        except httpx.HTTPError as exc:
            raise InputError(f"{url}: the transfer broke off after {received} bytes: {_first_line(exc)}") from None

    @contextmanager
    def get(self, path: str, headers: dict[str, str]) -> Iterator[tuple[httpx.Response, httpx.URL]]:
        """A streamed GET of base/path, following at most MAX_REDIRECTS same-scheme redirects (same origin
        unless limits.other_hosts); the request's deadline runs from here to the body's last byte."""
        url = self.url(path)
        response = None
        self.budget.start()
        try:
            for _ in range(MAX_REDIRECTS + 1):
                response = self._send(url, headers)
                if not response.is_redirect:
                    break
                location = response.headers.get("location", "")
                response.close()
                target = url.join(location)
                if target.scheme != url.scheme:
                    raise InputError(f"{url}: redirected to {str(target)[:200]}, another scheme, which is refused")
                if not self.limits.other_hosts and _origin(target) != _origin(self.base):
                    raise InputError(
                        f"{url}: redirected to {str(target)[:200]}, another host or port than the run's, which is "
                        "refused (--allow-other-hosts to follow it)"
                    )
                url, response = target, None
            if response is None:
                raise InputError(f"{self.url(path)}: more than {MAX_REDIRECTS} redirects")
            yield response, url
        except (SlowTransfer, RefusedAddress) as exc:
            raise InputError(f"{url}: {exc}") from None
        except httpx.TimeoutException:
            raise InputError(f"{url}: no response within {self.read_timeout:g} s (timed out)") from None
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            raise InputError(f"{url}: {_first_line(exc)}") from None
        finally:
            if response is not None:
                response.close()

    def _send(self, url: httpx.URL, headers: dict[str, str]) -> httpx.Response:
        """A streamed GET; once more, on another connection, if the server hung up before any response.

        A server may close a kept-alive connection just as the next request goes out on it (one that
        closes after a response without saying `Connection: close`, or an idle timeout): the request then
        fails with no response at all, and RFC 9112 (section 9.3.1) lets a client retry an idempotent
        request on a new connection. httpx drops the dead connection; one retry, so a server that always
        hangs up is still one line of error."""
        try:
            return self.client.send(self.client.build_request("GET", url, headers=headers), stream=True)
        except httpx.RemoteProtocolError:
            return self.client.send(self.client.build_request("GET", url, headers=headers), stream=True)

    def report(self, path: str, done: int, total: int | None) -> None:
        if self.on_progress is not None:
            self.on_progress(path, done, total)


def _origin(url: httpx.URL) -> tuple[str, str, int | None]:
    default = {"http": 80, "https": 443}.get(url.scheme)
    return url.scheme, url.host.lower(), url.port if url.port is not None else default


def _first_line(exc: Exception) -> str:
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
