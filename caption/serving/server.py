"""The attention page's web server: Python's standard library (`http.server`), one thread per request.

    GET  /                          the page (page.html: inline CSS and JavaScript, nothing fetched from elsewhere)
    GET  /api/about                 the models, the test images on offer, the page's settings (JSON)
    GET  /api/test_images/<i>.png   test image i
    POST /api/caption?num_captions=k&name=f   body: image file f's bytes -> every model's captions and overlays
    POST /api/caption?test_image=i&num_captions=k                           -> the same for test image i

A request the server cannot answer gets JSON {"error": one line} with its status: 400 for an image that is not one
or a setting out of range, 404 for an unknown address, 411 without a Content-Length, 413 for an upload over the
limit; an unforeseen failure is a 500 with one line on the page and the traceback in the server's console.
"""

from __future__ import annotations

import io
import json
import sys
import traceback
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib.resources import files
from typing import Any
from urllib.parse import parse_qs, urlsplit

from caption.data.sources.image_files import BadImageError, read_rgb
from caption.errors import CaptionError
from caption.serving.viewer import AttentionViewer

CHUNK_BYTES = 1 << 20  # an upload over the limit is read and dropped in pieces of this size


class RequestError(Exception):
    """A request the server answers with `status` and the message, as JSON."""

    def __init__(self, status: HTTPStatus, message: str):
        super().__init__(message)
        self.status = status


class AttentionServer(ThreadingHTTPServer):
    """A ThreadingHTTPServer that knows the viewer and the upload limit its handlers use."""

    daemon_threads = True  # Ctrl-C does not wait for open connections

    def __init__(self, address: tuple[str, int], viewer: AttentionViewer, *, max_upload_bytes: int):
        super().__init__(address, AttentionHandler)
        self.viewer = viewer
        self.max_upload_bytes = max_upload_bytes
        self.page = files("caption.serving").joinpath("page.html").read_bytes()

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}/"


class AttentionHandler(BaseHTTPRequestHandler):
    server: AttentionServer
    server_version = "caption-serve"

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
        raise RequestError(HTTPStatus.NOT_FOUND, f"no page {path}")

    def post(self, path: str, query: dict[str, str]) -> tuple[bytes, str]:
        if path != "/api/caption":
            raise RequestError(HTTPStatus.NOT_FOUND, f"no page {path}")
        viewer = self.server.viewer
        num_captions = query.get("num_captions", viewer.num_captions)
        if "test_image" in query:
            index = whole_number(query["test_image"], "test image")
            return as_json(viewer.caption_test_image(index, num_captions=num_captions)), "application/json"
        body = self.upload()
        if not body:
            raise RequestError(HTTPStatus.BAD_REQUEST, "no image: drop an image file on the page")
        try:
            image = read_rgb(io.BytesIO(body), min_side=1)
        except BadImageError as error:
            raise RequestError(HTTPStatus.BAD_REQUEST, f"{query.get('name', 'the upload')}: {error}") from None
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
                self.rfile.read(min(CHUNK_BYTES, size - start))
            raise RequestError(HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                               f"the image is {size / 1e6:.1f} MB; this server takes images up to "
                               f"{limit / 1e6:.1f} MB (caption serve --max_upload_mb)")
        return self.rfile.read(size)

    def answer(self, respond: Any) -> None:
        """Run `respond(path, query)` and send what it gives, or its error as one line of JSON."""
        parts = urlsplit(self.path)
        query = {key: values[-1] for key, values in parse_qs(parts.query).items()}
        try:
            body, content_type = respond(parts.path, query)
            status = HTTPStatus.OK
        except RequestError as error:
            body, content_type, status = error_json(str(error)), "application/json", error.status
        except CaptionError as error:  # a bad image or setting: the message says what to do
            body, content_type, status = error_json(str(error)), "application/json", HTTPStatus.BAD_REQUEST
        except Exception as error:  # unforeseen: one line on the page, the traceback in the console
            traceback.print_exc(file=sys.stderr)
            message = f"the server failed: {error.__class__.__name__}: {error}"
            body, content_type, status = error_json(message), "application/json", HTTPStatus.INTERNAL_SERVER_ERROR
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        try:
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):  # the page was closed or reloaded meanwhile
            pass

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the page shows what went wrong; an unforeseen failure prints its traceback."""


def whole_number(text: str, what: str) -> int:
    """`text` as an integer >= 0, or a 400 naming `what`."""
    if not text.isdigit():
        raise RequestError(HTTPStatus.BAD_REQUEST, f"{what} must be a whole number, got {text!r}")
    return int(text)


def as_json(answer: dict[str, Any]) -> bytes:
    return json.dumps(answer).encode("utf-8")


def error_json(message: str) -> bytes:
    return as_json({"error": " ".join(message.split())})
