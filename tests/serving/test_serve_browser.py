"""`caption serve` in a real browser: Debian's headless Chromium, driven through its chromedriver by selenium. The page
is loaded, an image dropped on it, its captions read, a word hovered and the overlay on the screen compared with the
panel `captioner.plot` draws for the same image and word; a bad file gets its message on the page."""

import base64
import io
import subprocess
import threading
from pathlib import Path

import numpy as np
import pytest
from kit.cli import PATIENCE_S, start
from kit.data import write_image
from kit.figures import word_axes
from matplotlib import colormaps
from matplotlib.backends.backend_agg import FigureCanvasAgg
from PIL import Image
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from caption.evaluation.grid import attention_grid
from caption.evaluation.overlays import COLORMAP, HEAT_OPACITY, comparison_figure, grey, to_uint8
from caption.inference import Captioner
from caption.io.checkpoints import find_checkpoint

CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not (CHROMIUM.is_file() and CHROMEDRIVER.is_file()),
                       reason="Chromium is not installed here: apt-get install -y chromium chromium-driver"),
]
# Chromium as root, offline and quiet: no sandbox (root), no GPU, no background fetches, a fresh profile
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--window-size=1400,1000",
         "--force-device-scale-factor=1")
WAIT_S = 120  # for a caption on a busy machine


@pytest.fixture
def served(tiny_runs):
    """`caption serve` on the tiny soft and hard runs, on a free port: its URL; stopped with Ctrl-C afterwards."""
    process = start("serve", "--ckpt_path", str(tiny_runs["soft"]), "--ckpt_path", str(tiny_runs["hard"]),
                    "--port", "0", "--trainer.accelerator", "cpu")
    watchdog = threading.Timer(PATIENCE_S, process.kill)
    watchdog.start()
    lines = []
    while not (lines and lines[-1].startswith("serving on ")):
        line = process.stdout.readline()
        assert line, f"caption serve ended early ({process.wait()}):\n{''.join(lines)[-4000:]}"
        lines.append(line)
    watchdog.cancel()
    yield lines[-1].split()[2]
    process.send_signal(subprocess.signal.SIGINT)
    output, _ = process.communicate(timeout=PATIENCE_S)
    assert process.returncode == 0 and output.strip().endswith("stopped"), output[-2000:]


@pytest.fixture
def browser(tmp_path):
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in (*FLAGS, f"--user-data-dir={tmp_path / 'chromium-profile'}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    yield driver
    driver.quit()


def drop(browser: webdriver.Chrome, path: Path) -> None:
    """Drop the file at `path` on the page's drop zone, as a drag from the desktop does."""
    browser.execute_script("""
        const bytes = Uint8Array.from(atob(arguments[0]), c => c.charCodeAt(0));
        const transfer = new DataTransfer();
        transfer.items.add(new File([bytes], arguments[1], { type: "image/png" }));
        document.querySelector("#drop").dispatchEvent(new DragEvent("drop", { dataTransfer: transfer, bubbles: true,
                                                                              cancelable: true }));
    """, base64.b64encode(path.read_bytes()).decode("ascii"), path.name)


def captions_shown(browser: webdriver.Chrome, model: str) -> list[str]:
    rows = browser.find_elements(By.CSS_SELECTOR, f".model[data-model={model}] .caption .words")
    return [" ".join(row.text.split()) for row in rows]


def colour_levels(pixels: np.ndarray, image: np.ndarray) -> np.ndarray:
    """Where on the colour scale (0..1) each pixel of a word's panel (H, W, 3) lies: its heat colour, with the grey
    `image` under it taken out, matched to the nearest colour of the colour map."""
    heat = (pixels / 255 - (1 - HEAT_OPACITY) * grey(image)[..., None] / 255) / HEAT_OPACITY  # (H, W, 3)
    table = colormaps[COLORMAP](np.linspace(0, 1, 256))[:, :3]  # (256, 3)
    return ((heat[..., None, :] - table) ** 2).sum(-1).argmin(-1) / 255  # (H, W)


def figure_panel(figure, t: int, size: tuple[int, int]) -> np.ndarray:
    """The pixels of word `t`'s panel of the first model's block of a rendered comparison figure, resized to `size`
    (H, W)."""
    canvas = FigureCanvasAgg(figure)
    canvas.draw()
    rendered = np.asarray(canvas.buffer_rgba())[..., :3]
    first = figure.subfigs[0]  # the first model's block: its panels' positions are within the block
    x0, y0, x1, y1 = word_axes(first)[t].get_window_extent().extents  # display pixels, from the bottom left
    top, bottom = rendered.shape[0] - y1, rendered.shape[0] - y0
    inside = rendered[round(top) + 2:round(bottom) - 2, round(x0) + 2:round(x1) - 2]  # the frame left out
    return np.asarray(Image.fromarray(inside).resize(size[::-1], Image.Resampling.BOX))


def test_a_dropped_image_is_captioned_and_a_hovered_word_shows_the_overlay_captioner_plot_draws(
        served, browser, tiny_runs, tmp_path):
    photo = write_image(tmp_path / "photo.png", size=(96, 80), seed=1)
    captioners = {kind: Captioner.from_checkpoint(find_checkpoint(tiny_runs[kind]), device="cpu")
                  for kind in ("soft", "hard")}
    expected = {kind: captioner(str(photo)) for kind, captioner in captioners.items()}

    browser.get(served)
    WebDriverWait(browser, WAIT_S).until(lambda page: page.find_elements(By.CSS_SELECTOR, "#tests img"))
    drop(browser, photo)
    WebDriverWait(browser, WAIT_S).until(lambda page: captions_shown(page, "hard"))
    assert {kind: captions_shown(browser, kind) for kind in expected} == {
        kind: [caption.text] for kind, caption in expected.items()}, "each model's caption, side by side"
    link = browser.find_element(By.CSS_SELECTOR, "#download_json")
    assert link.is_displayed() and link.get_attribute("href").startswith("blob:"), "the answer can be downloaded"
    downloaded = browser.execute_async_script("fetch(arguments[0]).then(r => r.json()).then(arguments[1])",
                                              link.get_attribute("href"))
    assert [model["name"] for model in downloaded["models"]] == ["soft", "hard"] and downloaded["vmax"] > 0

    soft = expected["soft"]
    assert soft.words, "the tiny soft model says something about the photo"
    t = int(soft.alpha.max(dim=1).values.argmax())  # the word it looked at most sharply
    word = browser.find_elements(By.CSS_SELECTOR, ".model[data-model=soft] .caption .word")[t]
    ActionChains(browser).move_to_element(word).perform()
    picture = browser.find_element(By.CSS_SELECTOR, ".model[data-model=soft] .view img")
    WebDriverWait(browser, WAIT_S).until(lambda page: "β" in page.find_element(
        By.CSS_SELECTOR, ".model[data-model=soft] .status").text)
    browser.save_screenshot(str(tmp_path / "page.png"))
    screen = Image.open(io.BytesIO(picture.screenshot_as_png)).convert("RGB")
    image = to_uint8(captioners["soft"].prepare(str(photo)), *captioners["soft"].normalization)  # what the model saw
    size = image.shape[:2]
    on_page = colour_levels(np.asarray(screen.resize(size[::-1], Image.Resampling.BOX)), image)
    overlays = [captioner.overlay(captioner.prepare(str(photo)), expected[kind])
                for kind, captioner in captioners.items()]
    in_figure = colour_levels(figure_panel(comparison_figure(overlays), t, size), image)  # soft's block comes first
    peak_page, peak_figure = (np.unravel_index(levels.argmax(), size) for levels in (on_page, in_figure))
    # the attention peak on the page is where the figure's is (a tiny model's may be a ridge: at its top, anywhere)
    assert in_figure[peak_page] >= in_figure.max() - 0.03 and on_page[peak_figure] >= on_page.max() - 0.03
    assert np.abs(on_page - in_figure).mean() < 0.05, "the same overlay, on the colour scale compare's figure shares"
    assert np.corrcoef(on_page.ravel(), in_figure.ravel())[0, 1] > 0.9

    hard = expected["hard"]
    if hard.words:  # hard attention outlines the cell it chose
        word = browser.find_element(By.CSS_SELECTOR, ".model[data-model=hard] .caption .word")
        ActionChains(browser).move_to_element(word).perform()
        box = browser.find_element(By.CSS_SELECTOR, ".model[data-model=hard] .cell")
        WebDriverWait(browser, WAIT_S).until(lambda page: box.is_displayed())
        view = browser.find_element(By.CSS_SELECTOR, ".model[data-model=hard] .view").rect
        rows, columns = attention_grid(hard.alpha.shape[-1], size)
        row, column = divmod(int(hard.locations[0]), columns)
        assert box.rect["x"] - view["x"] == pytest.approx(column / columns * view["width"], abs=2)
        assert box.rect["y"] - view["y"] == pytest.approx(row / rows * view["height"], abs=2)

    notes = tmp_path / "notes.png"
    notes.write_text("not an image")
    browser.find_element(By.CSS_SELECTOR, "#file").send_keys(str(notes))
    message = browser.find_element(By.CSS_SELECTOR, "#message")
    WebDriverWait(browser, WAIT_S).until(lambda page: message.is_displayed())
    assert message.text == "notes.png: not an image file Pillow can read"
