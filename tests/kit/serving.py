"""`caption serve`'s server in the tests' own process, on untrained tiny models: starting it, and talking to it with
urllib or, byte for byte, over a raw socket."""

import contextlib
import socket
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import torch

from caption.data.synthetic.shapes import ShapesSource
from caption.inference import Captioner
from caption.reports.runs import Model
from caption.serving.server import AttentionServer
from caption.serving.viewer import AttentionViewer
from kit.cli import PATIENCE_S
from kit.models import tiny_module

VOCABULARY = ["<pad>", "<start>", "<end>", "<unk>", "a", "red", "green", "circle", "square", "above", "below"]
MAX_UPLOAD_BYTES = 50_000


def tiny_captioner(kind: str, data_root: Path | None, seed: int) -> Captioner:
    """An untrained tiny model on the built-in data's 64×64 inputs (its test split under `data_root`, if given)."""
    torch.manual_seed(seed)
    module = tiny_module(VOCABULARY, kind, decoding={"max_caption_length": 6, "beam_size": 3})
    source = {"class_path": "caption.data.synthetic.shapes.ShapesSource",
              "init_args": {"root": str(data_root), "num_train": 4, "num_val": 2, "num_test": 3}}
    shapes = ShapesSource()
    return Captioner(module.model, transform=shapes.inference_transform(), normalization=shapes.normalization,
                     data=None if data_root is None else ({"source": source}, "the test"))


def serve(models: list[Model], *, limits: dict | None = None, **settings) -> AttentionServer:
    """A server on a free port of 127.0.0.1 (`limits`: AttentionServer's timeout_s, upload_timeout_s,
    max_connections, max_connections_per_client, allowed_hosts), answering in a thread until `stop()`."""
    server = AttentionServer(("127.0.0.1", 0), AttentionViewer(models, **settings), max_upload_bytes=MAX_UPLOAD_BYTES,
                             **(limits or {}))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def stop(server: AttentionServer) -> None:
    server.shutdown()
    server.server_close()


@contextlib.contextmanager
def serving(data_root: Path | None = None, **limits) -> Iterator[AttentionServer]:
    """A server of one tiny soft model (its test images under `data_root`, if given), stopped afterwards."""
    server = serve([Model("soft", Path("soft.ckpt"), tiny_captioner("soft", data_root, 0), None)], limits=limits)
    try:
        yield server
    finally:
        stop(server)


def request(server: AttentionServer, path: str, body: bytes | None = None) -> tuple[int, bytes]:
    """(status, body) of GET `path`, or of POST `body` to it."""
    try:
        url = server.url + path.lstrip("/")
        with urllib.request.urlopen(urllib.request.Request(url, data=body), timeout=PATIENCE_S) as got:
            return got.status, got.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


class Answer(NamedTuple):
    """What came back on a raw connection: the status (None: closed without an answer), headers and body."""

    status: int | None
    headers: dict[str, str]
    body: bytes


def parse_answer(data: bytes) -> Answer:
    """An HTTP answer's bytes; an answer that does not start with a status line is an AssertionError."""
    if not data:
        return Answer(None, {}, b"")
    head, _, body = data.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("iso-8859-1").split("\r\n")
    version, status, _ = (status_line + " ").split(" ", 2)
    assert version.startswith("HTTP/1.") and status.isascii() and status.isdigit(), data[:200]
    headers = {name.strip().lower(): value.strip() for name, _, value in (line.partition(":") for line in lines)}
    return Answer(int(status), headers, body)


def exchange(server: AttentionServer, data: bytes, *, timeout: float = PATIENCE_S) -> Answer:
    """Send `data` as it is on a new connection, say that nothing more comes, and read the answer to its end."""
    with socket.create_connection(server.server_address[:2], timeout=timeout) as connection:
        try:
            connection.sendall(data)
            connection.shutdown(socket.SHUT_WR)
        except OSError:  # answered and closed before all was sent
            pass
        return parse_answer(read_all(connection))


def read_all(connection: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (a reset after its answer ends it too)."""
    chunks = []
    try:
        while chunk := connection.recv(1 << 16):
            chunks.append(chunk)
    except ConnectionResetError:
        pass
    return b"".join(chunks)
