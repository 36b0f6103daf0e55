"""The README and docs/*.md: every relative link points to a file that exists, and to a heading of it when it
names one; the README stays a short entry point."""

import re
import unicodedata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
FENCED_CODE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
INLINE_CODE = re.compile(r"`[^`\n]*`")


def heading_anchor(heading: str) -> str:
    """GitHub's anchor for a Markdown heading: lower case, punctuation dropped, spaces to hyphens."""
    text = heading.strip().lower().replace("`", "")
    kept = "".join(c for c in text if c in " -_" or unicodedata.category(c)[0] in "LN")
    return kept.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = FENCED_CODE.sub("", page.read_text(encoding="utf-8"))
    return {heading_anchor(line.lstrip("#")) for line in text.splitlines() if re.match(r"#{1,6} ", line)}


def relative_links(page: Path) -> list[str]:
    text = INLINE_CODE.sub("", FENCED_CODE.sub("", page.read_text(encoding="utf-8")))
    return [target for target in LINK.findall(text) if not re.match(r"[a-z][a-z0-9+.-]*:", target)]


def test_heading_anchor_follows_github():
    assert heading_anchor("Hard attention: what it takes") == "hard-attention-what-it-takes"
    assert heading_anchor("COCO, Flickr8k, Flickr30k") == "coco-flickr8k-flickr30k"
    assert heading_anchor("Python 3.11 and later") == "python-311-and-later"
    assert heading_anchor("The `model:` groups") == "the-model-groups"


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.relative_to(ROOT).as_posix())
def test_every_relative_link_resolves(page):
    broken = []
    for target in relative_links(page):
        path_part, _, anchor = target.partition("#")
        linked = (page.parent / path_part).resolve() if path_part else page
        if not linked.exists():
            broken.append(f"{target}: no file {linked.relative_to(ROOT) if linked.is_relative_to(ROOT) else linked}")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            broken.append(f"{target}: no heading with anchor #{anchor} in {linked.relative_to(ROOT)}")
    assert not broken, f"{page.relative_to(ROOT)} has broken links:\n" + "\n".join(broken)


def test_docs_pages_are_linked_from_the_readme():
    linked = {target.partition("#")[0] for target in relative_links(ROOT / "README.md")}
    missing = [page.name for page in PAGES[1:] if f"docs/{page.name}" not in linked]
    assert not missing, f"docs pages the README does not link to: {missing}"


def test_readme_stays_short():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").count("\n")
    assert lines <= 200, f"README.md has {lines} lines; move detail into docs/*.md"


QUICK_START_TIME = "2.8 minutes"  # docs/measurements.md, "The quick start's results": 39 s + 127 s, alone


@pytest.mark.parametrize("path", ["README.md", "docs/measurements.md", "configs/shapes.yaml", "notebooks/demo.ipynb",
                                  "notebooks/soft_vs_hard.ipynb"])
def test_every_place_that_times_the_quick_start_quotes_the_one_measured_figure(path):
    text = (ROOT / path).read_text(encoding="utf-8")
    assert QUICK_START_TIME in text and "AMD EPYC" in text, path
    assert not re.search(r"5 to 11 minutes|about 10 minutes each|up to 11 on slower", text), path


def test_the_timings_say_what_to_do_on_a_shared_machine():
    for path in ("README.md", "docs/measurements.md"):
        text = (ROOT / path).read_text(encoding="utf-8")
        assert "OMP_NUM_THREADS=1" in text and "#on-a-shared-machine" in text, path
    assert "torch.set_num_threads" in (ROOT / "docs/measurements.md").read_text(encoding="utf-8")
