"""`caption serve`: a local page that shows where each model looked for each word of its captions.

- `caption.serving.viewer`: the answers (captions, overlays, test images) as JSON-ready dicts, from `Captioner`s.
- `caption.serving.server`: the standard library's HTTP server around them, with the page (`page.html`).
"""
