"""What `caption serve`'s server refuses, each refusal one line of JSON and nothing in the console: requests naming
another host (DNS rebinding), requests left half sent or trickled, connections past the limit (of the server and of
one client), malformed numbers, other methods; byte for byte over raw sockets, from a server running in this process
on an untrained tiny model."""

import contextlib
import json
import select
import socket
import time

import pytest
from kit.cli import PATIENCE_S
from kit.data import write_image
from kit.serving import exchange, parse_answer, read_all, serving

from caption.serving.server import AttentionServer
from caption.serving.viewer import AttentionViewer


def get(path: str, host: str | None = "127.0.0.1", *, method: str = "GET", headers: str = "") -> bytes:
    """A request's bytes: `method path HTTP/1.1`, its Host (none for None) and `headers` (lines ending in CRLF)."""
    named = "" if host is None else f"Host: {host}\r\n"
    return f"{method} {path} HTTP/1.1\r\n{named}{headers}\r\n".encode()


def one_line_error(answer, status: int, *named: str) -> str:
    """The error of an answer that must have `status` and one line of JSON naming everything in `named`."""
    assert answer.status == status, (answer.status, answer.body[:300])
    assert answer.headers["content-type"] == "application/json"
    error = json.loads(answer.body)["error"]
    assert "\n" not in error and "Traceback" not in error and all(name in error for name in named), error
    return error


@contextlib.contextmanager
def half_open(server, count: int):
    """`count` connections that each send half a request and hold their thread until they close (on leaving)."""
    holders = [socket.create_connection(server.server_address[:2], timeout=PATIENCE_S) for _ in range(count)]
    try:
        for holder in holders:
            holder.sendall(b"GET /api/about HTTP/1.1\r\n")
        yield
    finally:
        for holder in holders:
            holder.close()


def served_again(server, refused: int) -> None:
    """Wait (at most PATIENCE_S) until the holders' threads have seen them closed and a request is served again."""
    deadline = time.monotonic() + PATIENCE_S
    while (status := exchange(server, get("/api/about")).status) == refused and time.monotonic() < deadline:
        time.sleep(0.05)
    assert status == 200


def test_only_requests_that_name_this_server_are_answered(tmp_path, capfd):
    with serving(tmp_path / "data", allowed_hosts=["lab-pc"]) as server:
        port = server.server_address[1]
        for host in ("127.0.0.1", f"127.0.0.1:{port}", "localhost", f"LocalHost:{port}", "[::1]:8000", "lab-pc:8000",
                     "localhost:9000"):  # any port: a forwarded port (ssh -L 9000:localhost:8000) names its own
            assert exchange(server, get("/api/about", host)).status == 200, host
        rebound = ("evil.example", f"evil.example:{port}", "127.0.0.1.evil.example", "localhost.evil.example:8000",
                   "127.0.0.2", "user@127.0.0.1", "127.0.0.1:80x", "", None)
        for host in rebound:
            for request in (get("/api/about", host), get("/", host),
                            get("/api/caption?test_image=0", host, method="POST", headers="Content-Length: 0\r\n")):
                answer = exchange(server, request)
                error = one_line_error(answer, 421, "this server answers requests for 127.0.0.1, [::1], lab-pc, "
                                                    "localhost", "caption serve --host")
                assert "soft.ckpt" not in error and "references" not in error and "captions" not in answer.body.decode()
    assert capfd.readouterr().err == ""


def test_a_request_with_more_than_one_host_header_is_a_400(tmp_path, capfd):
    with serving(tmp_path / "data") as server:
        for hosts in (("127.0.0.1", "evil.example"), ("evil.example", "127.0.0.1"), ("127.0.0.1", "127.0.0.1")):
            request = get("/api/about", hosts[0], headers=f"Host: {hosts[1]}\r\n")
            one_line_error(exchange(server, request), 400, "the request has 2 Host headers", "send exactly one")
    assert capfd.readouterr().err == ""


def test_listening_on_every_address_also_answers_a_host_that_is_an_ip_address(tmp_path):
    server = AttentionServer(("0.0.0.0", 0), AttentionViewer.__new__(AttentionViewer), max_upload_bytes=1)
    try:  # never served: only its rule is asked
        assert all(map(server.serves_host, ("192.168.1.20:8000", "10.0.0.5", "[fe80::1]:8000", "0.0.0.0", "localhost")))
        assert not any(map(server.serves_host, ("evil.example", "lab-pc", "192.168.1.20.evil.example", None)))
    finally:
        server.server_close()


def test_a_request_left_half_sent_gets_408_and_frees_its_thread(tmp_path, capfd):
    with serving(tmp_path / "data", timeout_s=0.5, max_connections=1) as server:
        address = server.server_address[:2]
        with socket.create_connection(address, timeout=PATIENCE_S) as connection:  # the headers never end
            connection.sendall(b"GET /api/about HTTP/1.1\r\nHost: localhost\r\n")
            one_line_error(parse_answer(read_all(connection)), 408, "not sent within 0.5 s", "--timeout_s")
        with socket.create_connection(address, timeout=PATIENCE_S) as connection:  # a body shorter than it said
            connection.sendall(get("/api/caption", "localhost", method="POST", headers="Content-Length: 1000\r\n")
                               + b"\x89PNG")
            one_line_error(parse_answer(read_all(connection)), 408, "not sent within 0.5 s")
        with socket.create_connection(address, timeout=PATIENCE_S) as connection:  # a header a byte at a time
            sent, deadline = 0, time.monotonic() + PATIENCE_S
            try:
                connection.sendall(b"GET / HTTP/1.1\r\nHost: localhost\r\nX-Slow: ")
                while time.monotonic() < deadline:  # each byte well within the timeout, for ever
                    connection.sendall(b"x")
                    sent += 1
                    time.sleep(0.05)
            except (BrokenPipeError, ConnectionResetError):
                pass
            answer = parse_answer(read_all(connection))
            assert time.monotonic() < deadline, "the server waited for the trickle's end"
            one_line_error(answer, 408, "not sent within 0.5 s")
        assert exchange(server, get("/api/about", "localhost")).status == 200, "the one thread is free again"
    assert capfd.readouterr().err == ""


def test_connections_past_the_limit_get_503_at_once(tmp_path, capfd):
    with serving(tmp_path / "data", timeout_s=PATIENCE_S, max_connections=2) as server:
        with half_open(server, 2):
            for _ in range(3):
                answer = exchange(server, get("/api/about"))
                one_line_error(answer, 503, "the server is busy", "--max_connections")
                assert answer.headers["retry-after"] == "1"
        served_again(server, refused=503)
    assert capfd.readouterr().err == ""


def trickle(connections: list[socket.socket], *, every_s: float, for_at_most_s: float) -> list[bytes]:
    """Send each connection a byte every `every_s` (or sooner) until the server has answered and closed each, or
    `for_at_most_s` have passed; what each connection got."""
    got = {connection: b"" for connection in connections}
    still_open, deadline = set(connections), time.monotonic() + for_at_most_s
    while still_open and time.monotonic() < deadline:
        for connection in still_open:
            try:
                connection.sendall(b"x")
            except OSError:  # answered and closed
                pass
        for connection in select.select(list(still_open), [], [], every_s)[0]:
            try:
                chunk = connection.recv(1 << 16)
            except ConnectionResetError:
                chunk = b""
            got[connection] += chunk
            if not chunk:
                still_open.discard(connection)
    return [got[connection] for connection in connections]


def test_uploads_trickled_a_byte_at_a_time_get_408_at_the_upload_timeout_and_free_their_places(tmp_path, capfd):
    with serving(tmp_path / "data", timeout_s=0.5, upload_timeout_s=1.0, max_connections=2) as server:
        address = server.server_address[:2]
        trickling = [socket.create_connection(address, timeout=PATIENCE_S) for _ in range(2)]
        try:
            for connection in trickling:  # a large body announced, then a byte well within timeout_s, for ever
                connection.sendall(get("/api/caption?name=photo.png", "localhost", method="POST",
                                       headers="Content-Length: 40000\r\n"))
            assert exchange(server, get("/api/about")).status == 503, "the trickling uploads hold every place"
            started = time.monotonic()
            answers = trickle(trickling, every_s=0.1, for_at_most_s=5.0)
            assert time.monotonic() - started < 4.0, "the server waited for the trickle's end"
        finally:
            for connection in trickling:
                connection.close()
        for answer in answers:
            one_line_error(parse_answer(answer), 408, "the request's body was not sent within 1 s of its headers",
                           "--upload_timeout_s")
        assert exchange(server, get("/api/about")).status == 200, "their places are free again"
    assert capfd.readouterr().err == ""


def test_one_client_cannot_take_every_place(tmp_path, capfd):
    with serving(tmp_path / "data", timeout_s=PATIENCE_S, max_connections=4, max_connections_per_client=2) as server:
        address = server.server_address[:2]
        with half_open(server, 2):
            for _ in range(3):
                answer = exchange(server, get("/api/about"))
                one_line_error(answer, 429, "this client already has 2 connections served",
                               "--max_connections_per_client")
                assert answer.headers["retry-after"] == "1"
            with socket.create_connection(address, timeout=PATIENCE_S, source_address=("127.0.0.2", 0)) as other:
                other.sendall(get("/api/about"))  # another client (address) of this machine is served meanwhile
                other.shutdown(socket.SHUT_WR)
                assert parse_answer(read_all(other)).status == 200
        served_again(server, refused=429)
    assert capfd.readouterr().err == ""


MALFORMED = {  # a number's text as sent (percent-encoded in a query) -> what the error names
    "%C2%B2": "digits 0-9",  # '²': str.isdigit() says yes, int() says no
    "%D9%A3": "digits 0-9",  # '٣' (Arabic-Indic three): int() takes it
    "%E0%A5%A9": "digits 0-9",  # '३' (Devanagari three)
    "%EF%BC%91": "digits 0-9",  # '１' (fullwidth one)
    "%203": "digits 0-9", "3%20": "digits 0-9", "%0A3": "digits 0-9", "+3": "digits 0-9", "-1": "digits 0-9",
    "3_0": "digits 0-9", "3.0": "digits 0-9", "0x1": "digits 0-9", "1e3": "digits 0-9", "%00": "digits 0-9",
    "9" * 5000: "has 5000 digits; at most 15",  # int() refuses over 4300 digits
    "9" * 16: "has 16 digits; at most 15",
}


@pytest.mark.parametrize("field", ["test_image", "num_captions"])
def test_a_malformed_number_in_a_query_is_a_400_in_one_line(tmp_path, capfd, field):
    with serving(tmp_path / "data") as server:
        other = "" if field == "test_image" else "&test_image=0"
        for text, reason in MALFORMED.items():
            answer = exchange(server, get(f"/api/caption?{field}={text}{other}", method="POST",
                                          headers="Content-Length: 0\r\n"))
            one_line_error(answer, 400, field.replace("_image", " image"), reason)
        assert exchange(server, get(f"/api/caption?{field}=0001&test_image=0", method="POST",
                                    headers="Content-Length: 0\r\n")).status == 200, "leading zeros are digits"
    assert "Traceback" not in capfd.readouterr().err


def test_a_malformed_number_in_a_path_or_a_content_length_is_a_400_in_one_line(tmp_path, capfd):
    with serving(tmp_path / "data") as server:
        for text in ("%C2%B2", "²", "٣", "-1", "9" * 5000, "1.5", ""):
            answer = exchange(server, get(f"/api/test_images/{text}.png"))
            one_line_error(answer, 400, "test image")
        for length in (b"\xb2", b"\xb3", b"\xb9", "٣".encode(), b"-1", b"+5", b"1e3", b"5 5", b"9" * 5000, b"0x10"):
            request = b"POST /api/caption HTTP/1.1\r\nHost: localhost\r\nContent-Length: " + length + b"\r\n\r\n"
            one_line_error(exchange(server, request), 400, "Content-Length")
    assert "Traceback" not in capfd.readouterr().err


def test_methods_other_than_get_and_post_are_a_405_in_one_line(tmp_path, capfd):
    with serving(tmp_path / "data") as server:
        for method in ("PUT", "DELETE", "HEAD", "OPTIONS", "BREW", "ÄÖ"):
            answer = exchange(server, get("/", method=method))
            one_line_error(answer, 405, "this page answers GET and POST")
            assert answer.headers["allow"] == "GET, POST"
    assert capfd.readouterr().err == ""


def test_an_image_cut_short_or_garbled_is_a_400_in_one_line(tmp_path, capfd):
    photo = write_image(tmp_path / "photo.png", size=(30, 20)).read_bytes()
    cut = [photo[:end] for end in range(1, len(photo) // 2)]  # in its header or its pixels (cut at the end of its
    # compressed pixels, Pillow reads it whole)
    garbled = [photo[:8] + length.to_bytes(4, "big") + photo[12:] for length in range(13)]  # its header's length
    # shorter than a header: Pillow raises ValueError, not OSError
    with serving(tmp_path / "data") as server:
        for body in cut + garbled:
            answer = exchange(server, get("/api/caption?name=photo.png", method="POST",
                                          headers=f"Content-Length: {len(body)}\r\n") + body)
            one_line_error(answer, 400, "photo.png: ")
    assert capfd.readouterr().err == ""
