"""The attention page's web server: Python's standard library (`http.server`), one thread per connection.

    GET  /                          the page (page.html: inline CSS and JavaScript, nothing fetched from elsewhere)
    GET  /api/about                 the models, the test images on offer, the page's settings (JSON)
    GET  /api/test_images/<i>.png   test image i
    POST /api/caption?num_captions=k&name=f   body: image file f's bytes -> every model's captions and overlays
    POST /api/caption?test_image=i&num_captions=k                           -> the same for test image i

A request the server cannot answer gets JSON {"error": one line} with its status: 400 for an image that is not one,
a number that is not digits 0-9 (or has more than MAX_DIGITS of them) or a setting out of range, 404 for an unknown
address, 405 for a method other than GET and POST, 408 for a request not sent within the timeout, 411 without a
Content-Length, 413 for an upload over the limit, 421 for a Host header that names another server, 429 while its
client has `max_connections_per_client` connections being served, 503 while `max_connections` connections are being
served; an unforeseen failure is a 500 with one line on the page and the traceback in the server's console (the only
thing it prints).

Who is answered: only requests whose Host header names this server as it was started: 127.0.0.1, localhost, [::1],
the `--host` it listens on and any `allowed_hosts`, with any port (a page of another site that has its name resolve
to 127.0.0.1, DNS rebinding, sends its own name and is refused); listening on every address (0.0.0.0, ::), also any
Host that is an IP address. Each request has `timeout_s` to send its request line and headers, then `upload_timeout_s`
to send its whole body, and at most `timeout_s` between two pieces of its body or of the answer, so that a request
left half sent, or sent a byte at a time, frees its thread; one client (an address) is served at most
`max_connections_per_client` connections at once, so that it cannot take every place.
"""

from __future__ import annotations

import io
import ipaddress
import json
import math
import re
import socket
import sys
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib.resources import files
from typing import Any
from urllib.parse import parse_qs, urlsplit

from caption.data.sources.image_files import BadImageError, read_rgb
from caption.errors import CaptionError
from caption.serving import MAX_CONNECTIONS, MAX_CONNECTIONS_PER_CLIENT, TIMEOUT_S, UPLOAD_TIMEOUT_S
from caption.serving.viewer import AttentionViewer

CHUNK_BYTES = 1 << 20  # an upload over the limit is read and dropped in pieces of this size
MAX_DIGITS = 15  # the longest number a request may give (an index, a count, a Content-Length)
LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")  # the names of this machine a page on it uses
EVERY_ADDRESS = ("", "0.0.0.0", "::")  # hosts that listen on every address of the machine
LINGER_S = 0.5  # after its answer, how long a connection's unread bytes are read (and dropped) before it is closed
SHOWN_CHARACTERS = 40  # of a value from a request, shown in a message


class RequestError(Exception):
    """A request the server answers with `status` and the message, as JSON."""

    def __init__(self, status: HTTPStatus, message: str):
        super().__init__(message)
        self.status = status


class AttentionServer(ThreadingHTTPServer):
    """A ThreadingHTTPServer that knows the viewer and the limits its handlers use.

    Args:
        address: (host, port) to listen on; port 0 takes any free one.
        viewer: what the page shows.
        max_upload_bytes: the largest image accepted.
        timeout_s: seconds a request has to send its request line and headers, and at most between two pieces of
            its body or of the answer.
        upload_timeout_s: seconds a request has to send its whole body, once its headers are in.
        max_connections: connections served at once; the next ones get 503 at once.
        max_connections_per_client: connections of one client address served at once; its next ones get 429 at
            once.
        allowed_hosts: names besides 127.0.0.1, localhost, [::1] and the host it listens on that a request's Host
            header may give (e.g. this machine's name on the network).
    """

    daemon_threads = True  # Ctrl-C does not wait for open connections

    def __init__(self, address: tuple[str, int], viewer: AttentionViewer, *, max_upload_bytes: int,
                 timeout_s: float = TIMEOUT_S, upload_timeout_s: float = UPLOAD_TIMEOUT_S,
                 max_connections: int = MAX_CONNECTIONS, max_connections_per_client: int = MAX_CONNECTIONS_PER_CLIENT,
                 allowed_hosts: Iterable[str] = ()):
        if not all(math.isfinite(seconds) and seconds > 0 for seconds in (timeout_s, upload_timeout_s)):
            raise ValueError(f"timeout_s and upload_timeout_s must be > 0, got {timeout_s} and {upload_timeout_s}")
        if max_connections < 1 or max_connections_per_client < 1:
            raise ValueError(f"max_connections and max_connections_per_client must be >= 1, got {max_connections} "
                             f"and {max_connections_per_client}")
        super().__init__(address, AttentionHandler)
        self.viewer = viewer
        self.max_upload_bytes = max_upload_bytes
        self.timeout_s = timeout_s
        self.upload_timeout_s = upload_timeout_s
        self.connections = threading.BoundedSemaphore(max_connections)
        self.max_connections_per_client = max_connections_per_client
        self.client_connections: Counter[str] = Counter()  # connections served per client address
        self.places = threading.Lock()  # guards the two counts above, taken and freed together
        self.host_names = {name.lower().strip("[]") for name in (*LOCAL_HOSTS, address[0], *allowed_hosts)}
        self.any_address = address[0] in EVERY_ADDRESS
        self.page = files("caption.serving").joinpath("page.html").read_bytes()

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{f'[{host}]' if ':' in host else host}:{port}/"

    def serves_host(self, header: str | None) -> bool:
        """Whether a request's Host header names this server (any port)."""
        name = host_name(header or "")
        if name is None:
            return False
        return name in self.host_names or (self.any_address and is_ip_address(name))

    def process_request(self, request: socket.socket, client_address: Any) -> None:
        """A thread for the connection while its client has fewer than `max_connections_per_client` and the server
        fewer than `max_connections` served; else 429 or 503 at once."""
        refusal = self.take_place(client=client_address[0])
        if refusal is not None:
            refuse_at_once(request, *refusal)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:  # no thread started: the connection is not served
            self.free_place(client=client_address[0])
            raise

    def take_place(self, *, client: str) -> tuple[HTTPStatus, str] | None:
        """Count a connection of `client` as served; or, when there is no place for it, the status and message of
        its refusal."""
        with self.places:
            if self.client_connections[client] >= self.max_connections_per_client:
                return HTTPStatus.TOO_MANY_REQUESTS, (
                    f"this client already has {self.max_connections_per_client} connections served, the most one "
                    "client may have at once (caption serve --max_connections_per_client); try again in a moment")
            if not self.connections.acquire(blocking=False):
                return HTTPStatus.SERVICE_UNAVAILABLE, (
                    "the server is busy: every connection it serves at once (caption serve --max_connections) is "
                    "taken; try again in a moment")
            self.client_connections[client] += 1
            return None

    def free_place(self, *, client: str) -> None:
        """A connection of `client` is no longer served."""
        with self.places:
            self.connections.release()
            self.client_connections[client] -= 1
            if not self.client_connections[client]:
                del self.client_connections[client]

    def process_request_thread(self, request: socket.socket, client_address: Any) -> None:
        """socketserver's own, with the connection's place freed before it closes: a client that saw it close and
        connects again finds the place free."""
        try:
            self.finish_request(request, client_address)
        except Exception:
            self.handle_error(request, client_address)
        finally:
            self.free_place(client=client_address[0])
            self.shutdown_request(request)

    def shutdown_request(self, request: socket.socket) -> None:
        let_go(request)

    def handle_error(self, request: socket.socket, client_address: Any) -> None:
        """A connection that failed outside an answer: quiet when the client went away or timed out (OSError),
        the traceback in the console otherwise (unforeseen)."""
        if not isinstance(sys.exc_info()[1], OSError):
            traceback.print_exc(file=sys.stderr)


class RequestReader(io.RawIOBase):
    """A connection's incoming bytes: each read waits at most `timeout_s`, and all of them together end at
    `deadline` (set by `expect` for a request's headers, then for its body), so that a request sent a byte at a time
    cannot hold its thread.

    Fields:
        timed_out: whether a read has timed out.
        missed_deadline: whether that read timed out at the deadline, not after `timeout_s` without a byte.
    """

    def __init__(self, connection: socket.socket, timeout_s: float):
        super().__init__()
        self.connection, self.timeout_s = connection, timeout_s
        self.deadline = time.monotonic() + timeout_s
        self.timed_out = self.missed_deadline = False

    def expect(self, *, within_s: float) -> None:
        """The next reads, together, end `within_s` from now."""
        self.deadline = time.monotonic() + within_s

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        left = self.deadline - time.monotonic()
        try:
            if left <= 0:
                raise TimeoutError("timed out")
            self.connection.settimeout(min(self.timeout_s, left))
            return self.connection.recv_into(buffer)
        except TimeoutError:
            self.timed_out, self.missed_deadline = True, left < self.timeout_s
            raise
        finally:
            self.connection.settimeout(self.timeout_s)  # for the answer's writes


class AttentionHandler(BaseHTTPRequestHandler):
    server: AttentionServer
    server_version = "caption-serve"
    answered = False  # whether a status line has been sent on this connection
    reading_body = False  # whether the request's headers are in (its reads are its body's)

    def setup(self) -> None:
        super().setup()
        self.connection.settimeout(self.server.timeout_s)
        self.rfile.close()  # the buffered reader of the socket, replaced by one of the reader with a deadline
        self.reader = RequestReader(self.connection, self.server.timeout_s)
        self.rfile = io.BufferedReader(self.reader)

    def handle_one_request(self) -> None:
        self.reading_body = False
        self.reader.expect(within_s=self.server.timeout_s)  # the request line and headers
        super().handle_one_request()  # a request line or headers not sent in time: it closes the connection
        if self.reader.timed_out and not self.answered:
            self.send_body(HTTPStatus.REQUEST_TIMEOUT, error_json(self.late()), "application/json")

    def late(self) -> str:
        """Why a request is answered 408, naming the setting it missed."""
        if self.reader.missed_deadline and self.reading_body:
            return (f"the request's body was not sent within {self.server.upload_timeout_s:g} s of its headers "
                    "(caption serve --upload_timeout_s)")
        return f"the request was not sent within {self.server.timeout_s:g} s (caption serve --timeout_s)"

    def do_GET(self) -> None:
        self.answer(self.get)

    def do_POST(self) -> None:
        self.answer(self.post)

    def get(self, path: str, query: dict[str, str]) -> tuple[bytes, str]:
        viewer = self.server.viewer
        if path == "/":
            return self.server.page, "text/html; charset=utf-8"
        if path == "/api/about":
            return as_json({**viewer.about(), "max_upload_bytes": self.server.max_upload_bytes}), "application/json"
        if path.startswith("/api/test_images/") and path.endswith(".png"):
            return viewer.test_image_png(whole_number(path.removeprefix("/api/test_images/").removesuffix(".png"),
                                                      "test image")), "image/png"
        raise RequestError(HTTPStatus.NOT_FOUND, f"no page {shown(path)}")

    def post(self, path: str, query: dict[str, str]) -> tuple[bytes, str]:
        if path != "/api/caption":
            raise RequestError(HTTPStatus.NOT_FOUND, f"no page {shown(path)}")
        viewer = self.server.viewer
        num_captions = (whole_number(query["num_captions"], "num_captions") if "num_captions" in query
                        else viewer.num_captions)
        if "test_image" in query:
            index = whole_number(query["test_image"], "test image")
            return as_json(viewer.caption_test_image(index, num_captions=num_captions)), "application/json"
        body = self.upload()
        if not body:
            raise RequestError(HTTPStatus.BAD_REQUEST, "no image: drop an image file on the page")
        try:
            image = read_rgb(io.BytesIO(body), min_side=1)
        except BadImageError as error:
            raise RequestError(HTTPStatus.BAD_REQUEST, f"{shown(query.get('name', 'the upload'))}: {error}") from None
        return as_json(viewer.caption_image(image, num_captions=num_captions)), "application/json"

    def upload(self) -> bytes:
        """The request's body, at most the server's upload limit (a larger one is read, dropped and refused)."""
        length = self.headers.get("Content-Length")
        if length is None:
            raise RequestError(HTTPStatus.LENGTH_REQUIRED, "no Content-Length: send the image as the request's body")
        size = whole_number(length, "Content-Length")
        limit = self.server.max_upload_bytes
        if size > limit:
            for start in range(0, size, CHUNK_BYTES):  # read, so that the browser sees the answer, not a reset
                if not self.rfile.read(min(CHUNK_BYTES, size - start)):
                    break  # the client sent less than it said, and stopped
            raise RequestError(HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                               f"the image is {size / 1e6:.1f} MB; this server takes images up to "
                               f"{limit / 1e6:.1f} MB (caption serve --max_upload_mb)")
        return self.rfile.read(size)

    def answer(self, respond: Callable[[str, dict[str, str]], tuple[bytes, str]]) -> None:
        """Run `respond(path, query)` for a request of a Host this server serves, and send what it gives, or its
        error as one line of JSON."""
        self.reading_body = True  # the headers are in: the whole body has upload_timeout_s
        self.reader.expect(within_s=self.server.upload_timeout_s)
        parts = urlsplit(self.path)
        query = {key: values[-1] for key, values in parse_qs(parts.query).items()}
        try:
            if self.request_version == "HTTP/0.9":  # a request line without a version
                raise RequestError(HTTPStatus.BAD_REQUEST, f"no HTTP version in {shown(self.requestline)!r}")
            hosts = self.headers.get_all("Host") or []
            if len(hosts) > 1:  # which one a proxy or this server would go by differs: answered for neither
                raise RequestError(HTTPStatus.BAD_REQUEST, f"the request has {len(hosts)} Host headers "
                                   f"({', '.join(repr(shown(host)) for host in hosts[:4])}): send exactly one")
            if not self.server.serves_host(self.headers.get("Host")):
                raise RequestError(HTTPStatus.MISDIRECTED_REQUEST, self.other_host())
            body, content_type = respond(parts.path, query)
            status = HTTPStatus.OK
        except RequestError as error:
            body, content_type, status = error_json(str(error)), "application/json", error.status
        except CaptionError as error:  # a bad image or setting: the message says what to do
            body, content_type, status = error_json(str(error)), "application/json", HTTPStatus.BAD_REQUEST
        except TimeoutError:  # the body, not sent within upload_timeout_s, or within timeout_s of its last piece
            self.close_connection = True
            body, content_type, status = error_json(self.late()), "application/json", HTTPStatus.REQUEST_TIMEOUT
        except Exception as error:  # noqa: BLE001 (unforeseen: one line on the page, the traceback in the console)
            traceback.print_exc(file=sys.stderr)
            message = f"the server failed: {error.__class__.__name__}: {error}"
            body, content_type, status = error_json(message), "application/json", HTTPStatus.INTERNAL_SERVER_ERROR
        self.send_body(status, body, content_type)

    def other_host(self) -> str:
        """Why a request of another Host (or of none) is refused, and what to do."""
        host = self.headers.get("Host")
        names = ", ".join(f"[{name}]" if ":" in name else name for name in sorted(self.server.host_names) if name)
        names += " or an IP address" if self.server.any_address else ""
        asked = f"not for {shown(host)!r}" if host else "and a request must name one in its Host header"
        return (f"this server answers requests for {names}, {asked}: open the page by one of those names "
                "(caption serve --host, --allowed_hosts)")

    def send_body(self, status: HTTPStatus, body: bytes, content_type: str) -> None:
        """The answer: status line, headers and `body`; a client gone or not reading meanwhile is let go."""
        self.answered = True
        if getattr(self, "request_version", "HTTP/0.9") == "HTTP/0.9":  # unknown, or none: answered as HTTP/1.0
            self.request_version = "HTTP/1.0"
        try:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            if status == HTTPStatus.METHOD_NOT_ALLOWED:
                self.send_header("Allow", "GET, POST")
            if self.close_connection:
                self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(body)
        except OSError:  # the page was closed or reloaded meanwhile, or stopped reading for timeout_s
            self.close_connection = True

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """http.server's own refusals (a malformed request line, headers too long or too many, another method) as
        one line of JSON; an unknown method is a 405 and an unknown HTTP version a 400, as this page knows two
        methods and HTTP/1.x."""
        status = HTTPStatus(code)
        if status == HTTPStatus.NOT_IMPLEMENTED:
            status = HTTPStatus.METHOD_NOT_ALLOWED
            message = f"this page answers GET and POST, not {shown(self.command)!r}"
        elif status == HTTPStatus.HTTP_VERSION_NOT_SUPPORTED:
            status = HTTPStatus.BAD_REQUEST
        self.close_connection = True
        self.send_body(status, error_json(message or status.phrase), "application/json")

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        """Quiet (see `log_message`)."""

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the page shows what went wrong; an unforeseen failure prints its traceback."""


def refuse_at_once(request: socket.socket, status: HTTPStatus, message: str) -> None:
    """Answer `status` with `message` on a connection there is no place for, at once and without a thread."""
    body = error_json(message)
    head = (f"HTTP/1.0 {status.value} {status.phrase}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nRetry-After: 1\r\nConnection: close\r\n\r\n")
    try:
        request.settimeout(LINGER_S)
        request.sendall(head.encode("ascii") + body)
    except OSError:  # gone already
        pass
    let_go(request)


def let_go(request: socket.socket) -> None:
    """Close a connection after its answer: say that nothing more comes, then read and drop what the client still
    sends, for at most LINGER_S, so that the answer reaches it (a connection closed with bytes unread is reset, and
    the reset can overtake the answer)."""
    deadline = time.monotonic() + LINGER_S
    try:
        request.shutdown(socket.SHUT_WR)
        while (left := deadline - time.monotonic()) > 0:
            request.settimeout(left)
            if not request.recv(CHUNK_BYTES):
                break
    except OSError:  # gone, or still sending after LINGER_S
        pass
    request.close()


def whole_number(text: str, what: str) -> int:
    """`text` as an integer >= 0 of ASCII digits (not '²' or '٣', which `int` or `str.isdigit` take), at most
    MAX_DIGITS of them; else a 400 naming `what`."""
    if not re.fullmatch("[0-9]+", text):
        raise RequestError(HTTPStatus.BAD_REQUEST, f"{what} must be a whole number (digits 0-9), got {shown(text)!r}")
    if len(text) > MAX_DIGITS:
        raise RequestError(HTTPStatus.BAD_REQUEST, f"{what} has {len(text)} digits; at most {MAX_DIGITS} are taken")
    return int(text)


def host_name(header: str) -> str | None:
    """The name of a Host header, lower-case, without its port and IPv6 brackets ('[::1]:8000' -> '::1'); None
    if it is malformed."""
    found = re.fullmatch(r"\[([0-9a-f:.]+)\](?::[0-9]*)?|([^:\[\]@/\s]+)(?::[0-9]*)?", header.strip().lower())
    return None if found is None else found.group(1) or found.group(2)


def is_ip_address(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def shown(text: str) -> str:
    """A value from a request, for a message: at most SHOWN_CHARACTERS of it."""
    return text if len(text) <= SHOWN_CHARACTERS else text[:SHOWN_CHARACTERS] + "..."


def as_json(answer: dict[str, Any]) -> bytes:
    return json.dumps(answer).encode("utf-8")


def error_json(message: str) -> bytes:
    return as_json({"error": " ".join(message.split())})
