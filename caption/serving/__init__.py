"""`caption serve`: a local page that shows where each model looked for each word of its captions.

- `caption.serving.viewer`: the answers (captions, overlays, test images) as JSON-ready dicts, from `Captioner`s.
- `caption.serving.server`: the standard library's HTTP server around them, with the page (`page.html`).
"""

MAX_CAPTIONS = 10  # the most captions per image the page may ask for (each is a beam of the search)
