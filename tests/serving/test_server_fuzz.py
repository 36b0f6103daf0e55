"""A seeded fuzz pass over `caption serve`'s server: random Unicode and malformed requests (methods, paths, queries,
versions, headers, Content-Length, bodies, requests cut short or left half sent) on raw sockets to a server running in
this process on an untrained tiny model. Each must get a 2xx or a 4xx with one line of JSON (or, for a request whose
first line is blank, a closed connection), within the client's socket timeout, and the console must stay silent."""

import io
import json
import random
import socket
import urllib.parse

from kit.cli import PATIENCE_S
from kit.data import write_image
from kit.serving import exchange, parse_answer, read_all, serving
from PIL import Image

SEED = 20150210  # the paper's arXiv date
REQUESTS = 400  # cut short, half-closed: answered at once
LEFT_OPEN = 4  # left half sent, not closed: each answered after the server's timeout
TIMEOUT_S = 0.5  # the server's, for the requests left open

DIGITS = "0123456789²³¹٣३１߃๓"  # ASCII digits and Unicode ones (superscripts, Arabic-Indic, Devanagari, fullwidth...)
UNICODE = "aé€😀\u0000\u00a0\u2028\u202e\ud7ff\ufeff\ufffd/?#%&=+ \t\r\n\\\"'<>"
PATHS = ["/", "/api/about", "/api/caption", "/api/test_images/0.png", "/api/test_images/", "/api", "//", "/..",
         "/api/caption/", "/api/about?", "*", "http://127.0.0.1/api/about", ""]
KEYS = ["test_image", "num_captions", "name", "x", "", "test_image[]"]


def fuzz_text(rng: random.Random, alphabet: str, most: int) -> str:
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, most)))


def number(rng: random.Random) -> str:
    """A number as a careless or hostile client writes it."""
    return rng.choice([
        lambda: str(rng.randint(0, 12)), lambda: fuzz_text(rng, DIGITS, 6), lambda: "9" * rng.choice([16, 4301, 5000]),
        lambda: f"-{rng.randint(1, 9)}", lambda: f" {rng.randint(0, 3)} ", lambda: f"{rng.randint(0, 3)}.5",
        lambda: "1_000", lambda: "0x1f", lambda: "", lambda: fuzz_text(rng, UNICODE, 8),
    ])()


def png(rng: random.Random, *, broken: bool) -> bytes:
    """An image file's bytes; `broken`: cut short or with bytes flipped."""
    buffer = io.BytesIO()
    Image.new("RGB", (rng.randint(1, 40), rng.randint(1, 40)), tuple(rng.randrange(256) for _ in range(3))).save(
        buffer, format=rng.choice(["PNG", "JPEG", "GIF", "BMP"]))
    data = bytearray(buffer.getvalue())
    if broken:
        for _ in range(rng.randint(1, 8)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        data = data[:rng.randint(0, len(data))]
    return bytes(data)


def target(rng: random.Random) -> str:
    path = rng.choice(PATHS + ["/api/test_images/" + number(rng) + ".png"] * 3)
    if rng.random() < 0.3:
        path += urllib.parse.quote(fuzz_text(rng, UNICODE, 6), safe="") if rng.random() < 0.5 else \
            fuzz_text(rng, UNICODE, 6)
    if rng.random() < 0.7:
        pairs = [(rng.choice(KEYS), number(rng) if rng.random() < 0.7 else fuzz_text(rng, UNICODE, 10))
                 for _ in range(rng.randint(0, 4))]
        path += "?" + ("&".join(f"{urllib.parse.quote(k)}={urllib.parse.quote(v)}" for k, v in pairs)
                       if rng.random() < 0.7 else fuzz_text(rng, UNICODE + "%zz%", 12))
    return path


def request(rng: random.Random, port: int) -> bytes:
    """One random request's bytes: mostly well-formed, with a malformed or random part or two."""
    odd = rng.random() < 0.15
    method = rng.choice(["HEAD", "PUT", "get", fuzz_text(rng, UNICODE, 5)]) if odd else rng.choice(["GET", "POST"])
    version = rng.choice(["HTTP/1.1", "HTTP/1.0"]) if rng.random() < 0.85 else rng.choice(
        ["HTTP/2.0", "HTTP/1", "", "HTTP/1.1 extra", fuzz_text(rng, UNICODE, 6)])
    line = " ".join(part for part in (method, target(rng), version) if part)
    body = rng.choice([b"", png(rng, broken=False), png(rng, broken=True), rng.randbytes(rng.randint(1, 300))])
    host = f"127.0.0.1:{port}" if rng.random() < 0.8 else rng.choice(
        ["localhost", "evil.example", fuzz_text(rng, UNICODE, 8)])
    headers = [f"Host: {host}"] if rng.random() < 0.95 else []
    if rng.random() < 0.9:
        headers.append(f"Content-Length: {len(body) if rng.random() < 0.75 else number(rng)}")
    for _ in range(rng.choice([0] * 7 + [1, 3, 120])):  # 120: past http.server's 100 headers
        headers.append(rng.choice([f"X-{fuzz_text(rng, 'abc', 4)}: {fuzz_text(rng, UNICODE, 12)}", "no colon",
                                   ": no name", f"X-Long: {'x' * rng.choice([10, 70000])}", " folded",
                                   "Transfer-Encoding: chunked", "Expect: 100-continue", "Connection: keep-alive"]))
    data = (line + "\r\n" + "".join(f"{header}\r\n" for header in headers) + "\r\n").encode("utf-8", "surrogatepass")
    data = data if rng.random() < 0.9 else data.replace(b"\r\n", b"\n")
    data += body
    return data[:rng.randint(0, len(data))] if rng.random() < 0.1 else data


def check(answer, data: bytes) -> None:
    """A 2xx, or a 4xx of one line of JSON; closed without an answer only when the request's first line is blank."""
    if answer.status is None:
        assert not data.split(b"\n", 1)[0].decode("iso-8859-1").split(), data[:200]
        return
    assert 200 <= answer.status < 300 or 400 <= answer.status < 500, (answer.status, answer.body[:300], data[:300])
    if answer.status >= 400:
        error = json.loads(answer.body)["error"]
        assert error and "\n" not in error and "Traceback" not in error, error


def test_random_and_malformed_requests_get_a_2xx_or_a_4xx_in_one_line(tmp_path, capfd):
    rng = random.Random(SEED)
    write_image(tmp_path / "photo.png")
    with serving(tmp_path / "data", timeout_s=TIMEOUT_S) as server:
        port = server.server_address[1]
        statuses = []
        for _ in range(REQUESTS):
            data = request(rng, port)
            answer = exchange(server, data, timeout=PATIENCE_S)  # a hang ends here, as a socket timeout
            check(answer, data)
            statuses.append(answer.status)
        for _ in range(LEFT_OPEN):  # sent in part and left open: the server's timeout answers
            data = request(rng, port)
            with socket.create_connection(server.server_address[:2], timeout=PATIENCE_S) as connection:
                connection.sendall(data[:rng.randint(1, max(1, len(data) - 1))])
                answer = parse_answer(read_all(connection))
            check(answer, data)
            statuses.append(answer.status)
    assert {200, 400, 404, 405, 421} <= set(statuses), "the fuzz reaches the answers and each refusal"
    assert capfd.readouterr().err == "", "nothing in the console: no traceback"
