"""Data files behind a URL (``https://``, ``s3://``, any fsspec protocol installed), read by range requests.

A path with a protocol (``scheme://``, other than ``file://``) is a URL: :func:`open_binary` opens it through
fsspec as a read-only file object with a block cache (:data:`BLOCK_BYTES` per request, the blocks a sample
spans kept), which h5py and the other readers take in place of a local file, so nothing is downloaded beyond the
blocks a read touches. :func:`stamp` tells a file from a later one at the same URL by its size and its ETag (or
modification time), asked of the server, never by reading it.

A request that times out (:data:`TIMEOUT_SECONDS` without an answer, over HTTP) or loses its connection is tried
again, :data:`TRIES` times in all with a growing pause; then the failure is one line. A refused connection, a
missing or forbidden file fail at once.

The storage options of a URL (an endpoint, a region, credentials: fsspec's ``storage_options``) are given once per
process (:func:`register`; a :class:`~pde_data.Source` registers its own again where it is unpickled, in a loader
worker). Secret ones (:func:`is_secret`) are never written anywhere: :func:`public` drops them from what a run
stores, and messages name a URL by :func:`display` (without user, password or query).
"""

from __future__ import annotations

import bisect
import hashlib
import re
import time
from typing import IO, Mapping
from urllib.parse import urlsplit, urlunsplit

__all__ = ["is_url", "absolute", "register", "set_default", "options_of", "nested", "filesystem", "open_binary", "stamp",
           "is_secret", "public", "display", "parse_option", "exists", "BLOCK_BYTES", "CACHED_BLOCKS",
           "RECHECK_SECONDS", "TRIES", "TIMEOUT_SECONDS", "PREFETCH_GAP", "RemoteError"]

#: bytes a read asks the server for at least (the block cache's block): 64 frames of 128² float32; 1 MiB blocks
#: streamed bench_data's shuffled windows slower (0.17x local against 0.24x: the requests' own cost dominates)
BLOCK_BYTES = 4 << 20
#: blocks the cache of one open file keeps (HDF5 metadata mostly: a read's data comes by its prefetch; 16 MiB). 32
#: blocks streamed bench_data's windows about as fast and took the training process past the streaming bound
#: (tests/test_memory.py): the process that fits the normalizers keeps its open file's cache while it trains
CACHED_BLOCKS = 4
#: seconds between two asks whether a file read at a URL changed (:meth:`pde_data.Source.verify` after its reads)
RECHECK_SECONDS = 10.0
#: bytes between two ranges a prefetch fetches as one (a request costs more than fetching this gap)
PREFETCH_GAP = 256 << 10
#: tries of a request that timed out or lost its connection, the pauses between them 0.5 s, 1 s, ...
TRIES = 3
#: seconds an HTTP request waits to connect and for each part of its answer (unless the storage options give
#: ``timeout`` or ``client_kwargs.timeout``; other protocols keep their clients' own, s3fs's with its own retries)
TIMEOUT_SECONDS = 60.0

_SECRET = re.compile(r"key|secret|token|password|passwd|credential|authorization|session", re.IGNORECASE)
_OPTIONS: dict[str, dict] = {}  # a URL's storage options in this process, secrets included
_DEFAULT: dict = {}  # the options of every URL in this process (a command's --storage-option)


class RemoteError(OSError):
    """A URL that cannot be read: the one line names it (:func:`display`), what was expected and what was found."""


def is_url(path: object) -> bool:
    """Whether ``path`` is a URL of a protocol other than local files (``file://`` is a local path)."""
    if not isinstance(path, str) or "://" not in path:
        return False
    scheme = path.split("://", 1)[0]
    return bool(re.fullmatch(r"[A-Za-z][A-Za-z0-9+.-]*", scheme)) and scheme.lower() not in ("file", "local")


def absolute(path: str) -> str:
    """A local path made absolute; a URL as it is."""
    import os

    return path if is_url(path) else os.path.abspath(path)


def display(url: str) -> str:
    """``url`` without user, password, query and fragment (what messages and files name it by)."""
    if not is_url(url):
        return url
    parts = urlsplit(url)
    host = parts.hostname or ""
    netloc = host + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def is_secret(key: str) -> bool:
    """Whether a storage option's name (or any part of a dotted name) holds a credential."""
    return bool(_SECRET.search(key))


def public(options: Mapping[str, object]) -> dict:
    """``options`` without the secret ones (what a run's files may keep), nested dicts filtered too."""
    out = {}
    for key, value in options.items():
        kept = public(value) if isinstance(value, Mapping) else value
        if not is_secret(key) and kept != {}:
            out[key] = kept
    return out


def _merged(base: Mapping, more: Mapping) -> dict:
    """``base`` with ``more`` over it, nested dicts merged key by key."""
    out = dict(base)
    for key, value in more.items():
        both = isinstance(value, Mapping) and isinstance(out.get(key), Mapping)
        out[key] = _merged(out[key], value) if both else value
    return out


def parse_option(text: str) -> tuple[str, object]:
    """``KEY=VALUE`` of ``--storage-option``: the value as an int, float, bool or None where it reads as one,
    else the text; a dotted key (``client_kwargs.region_name``) makes nested dicts (:func:`nested`)."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise ValueError(f"expected KEY=VALUE, found {text!r}")
    low = value.strip().lower()
    if low in ("true", "false"):
        return key.strip(), low == "true"
    if low in ("none", "null"):
        return key.strip(), None
    for number in (int, float):
        try:
            return key.strip(), number(value)
        except ValueError:
            pass
    return key.strip(), value


def nested(pairs: Mapping[str, object]) -> dict:
    """Dotted keys as nested dicts: ``{"a.b": 1}`` -> ``{"a": {"b": 1}}``."""
    out: dict = {}
    for key, value in pairs.items():
        *parents, last = key.split(".")
        level = out
        for part in parents:
            level = level.setdefault(part, {})
        level[last] = value
    return out


def register(url: str, options: Mapping[str, object] | None) -> None:
    """Add ``options`` to the storage options of ``url`` in this process (those given before and not in
    ``options`` are kept: a run's stored public options do not drop the secrets given on its command line)."""
    if options:
        _OPTIONS[url] = _merged(_OPTIONS.get(url, {}), options)


def set_default(options: Mapping[str, object]) -> None:
    """The storage options of every URL this process opens (a URL's own, :func:`register`, win)."""
    _DEFAULT.clear()
    _DEFAULT.update(options)


def options_of(url: str) -> dict:
    """The storage options of ``url`` in this process: the defaults, then its own, or those of the longest URL
    registered that holds it (a Zarr store's for its files; empty: fsspec's defaults and the environment's
    credentials)."""
    holders = [u for u in _OPTIONS if url == u or url.startswith(u.rstrip("/") + "/")]
    return _merged(_DEFAULT, _OPTIONS[max(holders, key=len)] if holders else {})


def filesystem(url: str):
    """The fsspec file system of ``url``'s protocol, made with the storage options of ``url`` in this process (over
    HTTP with :data:`TIMEOUT_SECONDS` unless they give a timeout)."""
    import fsspec

    protocol, options = url.split("://", 1)[0], options_of(url)
    if protocol in ("http", "https") and "timeout" not in options and "timeout" not in options.get("client_kwargs", {}):
        import aiohttp

        limit = aiohttp.ClientTimeout(total=None, sock_connect=TIMEOUT_SECONDS, sock_read=TIMEOUT_SECONDS)
        options = _merged(options, {"client_kwargs": {"timeout": limit}})
    try:
        return fsspec.filesystem(protocol, **options)
    except (ImportError, ValueError) as exc:
        raise RemoteError(f"{display(url)}: expected a protocol fsspec can read ({protocol}://), found "
                          f"{_first_line(exc)}") from None


def stamp(url: str) -> tuple[int, int]:
    """``(size, version)`` of the file at ``url``: the version a number made of its ETag, else of its modification
    time, as the server reports them (no byte of the file is read).

    Raises:
        FileNotFoundError: nothing at ``url`` (a 404).
        RemoteError: any other failure (refused, forbidden, timed out), in one line.
    """
    fs = filesystem(url)
    info = _tried(url, lambda: fs.info(url))
    if info.get("type") == "directory":
        raise RemoteError(f"{display(url)}: expected a data file, found a folder")
    version = next((str(info[k]) for k in ("ETag", "etag", "LastModified", "Last-Modified", "mtime", "last_modified")
                    if info.get(k) is not None), "")
    return int(info.get("size") or 0), int.from_bytes(hashlib.sha1(version.encode()).digest()[:7], "big")


def exists(url: str) -> bool:
    """Whether the server has a file at ``url`` (False where it cannot say: the read that follows names why)."""
    try:
        fs = filesystem(url)
        return bool(_tried(url, lambda: fs.exists(url)))
    except Exception:  # noqa: BLE001 - a refused or forbidden request: the file's own open reports it in one line
        return False


def open_binary(url: str) -> IO[bytes]:
    """A read-only, seekable file object of ``url`` whose reads fetch :data:`BLOCK_BYTES` blocks by range requests,
    keeping the last :data:`CACHED_BLOCKS` of them."""
    fs = filesystem(url)
    return _Retrying(url, _tried(url, lambda: fs.open(url, "rb", block_size=BLOCK_BYTES, cache_type="blockcache",
                                                      cache_options={"maxblocks": CACHED_BLOCKS})))


class _Retrying:
    """A remote file object whose reads are tried again from where they started (:func:`_tried`), and served from
    the ranges :meth:`prefetch` fetched where they lie inside one; the rest is the file object's own."""

    def __init__(self, url: str, fh):
        self._url, self._fh = url, fh
        self._starts: list[int] = []
        self._blobs: list[bytes] = []

    def prefetch(self, ranges: list[tuple[int, int]]) -> None:
        """Fetch the byte ranges ``[start, stop)`` at once (concurrent requests; ranges closer than
        :data:`PREFETCH_GAP` fetched as one), replacing the ranges fetched before: the reads that follow inside
        them (a window's chunks, which h5py asks for one by one) cost no request."""
        merged: list[list[int]] = []
        for start, stop in sorted(ranges):
            if merged and start <= merged[-1][1] + PREFETCH_GAP:
                merged[-1][1] = max(merged[-1][1], stop)
            else:
                merged.append([start, stop])
        fs, path = self._fh.fs, self._fh.path
        self._blobs = _tried(self._url, lambda: fs.cat_ranges([path] * len(merged), [a for a, _ in merged],
                                                              [b for _, b in merged]))
        self._starts = [a for a, _ in merged]

    def _prefetched(self, size: int) -> memoryview | None:
        """The next ``size`` bytes where a prefetched range holds them all (the position moved past them)."""
        start = self._fh.tell()
        k = bisect.bisect_right(self._starts, start) - 1
        if size < 0 or k < 0 or start + size > self._starts[k] + len(self._blobs[k]):
            return None
        self._fh.seek(start + size)
        offset = start - self._starts[k]
        return memoryview(self._blobs[k])[offset:offset + size]

    def read(self, size: int = -1) -> bytes:
        held = self._prefetched(size)
        if held is not None:
            return bytes(held)
        start = self._fh.tell()

        def read() -> bytes:
            self._fh.seek(start)
            return self._fh.read(size)

        return _tried(self._url, read)

    def readinto(self, buffer) -> int:
        target = memoryview(buffer).cast("B")
        data = self._prefetched(target.nbytes)
        data = self.read(target.nbytes) if data is None else data
        target[:len(data)] = data
        return len(data)

    def __getattr__(self, name: str):
        return getattr(self._fh, name)


def _tried(url: str, call):
    """``call()``, tried again after a timeout or a lost connection (:data:`TRIES` in all); any failure as one line
    (:func:`_failure`)."""
    for attempt in range(TRIES):
        try:
            return call()
        except Exception as exc:  # noqa: BLE001 - fsspec's protocols raise their clients' own errors
            if attempt + 1 == TRIES or not _transient(exc):
                raise _failure(url, exc, tries=attempt + 1) from None
        time.sleep(0.5 * 2 ** attempt)


def _chain(exc: BaseException) -> list[BaseException]:
    chain, cause = [], exc
    while cause is not None and len(chain) < 8:
        chain.append(cause)
        cause = cause.__cause__ or cause.__context__
    return chain


def _transient(exc: BaseException) -> bool:
    """A timeout or a connection lost on the way (worth another try), not a refusal or an answer."""
    chain = _chain(exc)
    if _refused(chain):
        return False
    return any(isinstance(e, (TimeoutError, ConnectionResetError, ConnectionAbortedError)) for e in chain) or any(
        n in _names(chain) for n in ("Timeout", "ServerDisconnected", "ClientPayloadError", "ClientOSError"))


def _refused(chain: list[BaseException]) -> bool:
    """Whether the connection was refused (aiohttp says so as a ``ClientConnectorError``)."""
    return any(isinstance(e, ConnectionRefusedError) for e in chain) or "ConnectorError" in _names(chain)


def _names(chain: list[BaseException]) -> str:
    return " ".join(type(e).__name__ for e in chain)


def _failure(url: str, exc: BaseException, tries: int = 1) -> OSError:
    """One line for a failed request (after ``tries``): a missing file, or what the server (or the network)
    answered."""
    chain = _chain(exc)
    status = next((getattr(e, "status", None) or getattr(e, "code", None) for e in chain
                   if isinstance(getattr(e, "status", None) or getattr(e, "code", None), int)), None)
    names = _names(chain)
    if _refused(chain):
        found = "no server answering (connection refused)"
    elif "Timeout" in names or any(isinstance(e, TimeoutError) for e in chain):
        found = f"no answer in time (timed out, {_tries(tries)})"
    elif _transient(exc):
        found = f"the connection lost ({type(exc).__name__}, {_tries(tries)})"
    elif status == 403 or any(isinstance(e, PermissionError) for e in chain):
        found = "access forbidden (403): check the credentials (the storage options, or the environment's)"
    elif status == 404 or (isinstance(exc, FileNotFoundError) and status is None):
        return FileNotFoundError(f"no such file: {display(url)} (the server has nothing at that address)")
    else:
        text = _first_line(exc).replace(url, display(url))  # the client's text may quote the URL whole
        found = f"{'HTTP ' + str(status) if status else type(exc).__name__}: {text}"
    return RemoteError(f"{display(url)}: expected a readable file, found {found}")


def _tries(n: int) -> str:
    return "1 try" if n == 1 else f"{n} tries"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
