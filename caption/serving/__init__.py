"""`caption serve`: a local page that shows where each model looked for each word of its captions.

- `caption.serving.viewer`: the answers (captions, overlays, test images) as JSON-ready dicts, from `Captioner`s.
- `caption.serving.server`: the standard library's HTTP server around them, with the page (`page.html`).
"""

MAX_CAPTIONS = 10  # the most captions per image the page may ask for (each is a beam of the search)
TIMEOUT_S = 10.0  # seconds a connection has to send its request line and headers, and at most between two pieces
# of its body or of the answer (ours: a page on this machine sends a request in milliseconds)
UPLOAD_TIMEOUT_S = 60.0  # seconds a request's whole body has to arrive once its headers are in (ours: a 20 MB image
# at 3 Mbit/s)
MAX_CONNECTIONS = 16  # connections served at once; the next ones get 503 at once (ours: one person's page asks a few)
MAX_CONNECTIONS_PER_CLIENT = 8  # connections of one client address served at once; its next ones get 429 at once
# (ours: a browser opens at most 6 to one server, and one client cannot take every place)
