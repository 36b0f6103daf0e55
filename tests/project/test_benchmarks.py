"""Every benchmark script runs: its `--help` prints, and its quickest real mode runs at a tiny size and writes its table
or file (a moved helper or a changed API breaks it here, not in front of whoever reruns a figure). The scripts run in
this process as `python benchmarks/<name>.py ...` runs them (benchmarks/ first on sys.path), in tmp_path, and write only
there. Every module of benchmarks/, helpers included, is run by one of these tests (`covers`)."""

import json
import runpy
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
SCRIPTS = sorted(path for path in BENCHMARKS.glob("*.py") if "__main__" in path.read_text())
COVERED: set[str] = set()  # the benchmarks/ modules the tests below run


def covers(*modules: str) -> Callable:
    """Mark a test as the real run of these benchmarks/ modules (file names without .py)."""
    def mark(test: Callable) -> Callable:
        COVERED.update(modules)
        return test
    return mark


@pytest.fixture
def benchmark(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, tmp_path: Path) -> Callable[..., str]:
    """run(name, *args): `python benchmarks/<name>.py args` in this process, in tmp_path; what it printed."""
    monkeypatch.chdir(tmp_path)  # a default output folder lands here, not in the repository
    monkeypatch.setattr(sys, "path", [str(BENCHMARKS), *sys.path])  # as `python benchmarks/<name>.py` has it

    def run(name: str, *args: str) -> str:
        script = BENCHMARKS / f"{name}.py"
        monkeypatch.setattr(sys, "argv", [str(script), *args])
        capsys.readouterr()
        runpy.run_path(str(script), run_name="__main__")
        return capsys.readouterr().out

    return run


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda path: path.name)
def test_benchmark_script_starts(script: Path, benchmark: Callable[..., str], capsys: pytest.CaptureFixture):
    with pytest.raises(SystemExit) as stopped:
        benchmark(script.stem, "--help")
    assert stopped.value.code == 0
    assert "usage:" in capsys.readouterr().out


def test_every_benchmark_module_has_a_real_run():
    assert {path.stem for path in BENCHMARKS.glob("*.py")} == COVERED


@covers("paired_coverage")
def test_paired_coverage(benchmark: Callable[..., str], tmp_path: Path):
    out = benchmark("paired_coverage", "--trials", "10", "--seeds", "2", "--out", str(tmp_path / "coverage"))
    assert "| cider | seeds | 2 |" in out and "| attention_accuracy | images | 2 |" in out
    cells = json.loads((tmp_path / "coverage" / "paired_coverage.json").read_text())["cells"]
    assert len(cells) == 4 and all(0 <= cell["coverage"] <= 1 for cell in cells)


@pytest.mark.slow
@covers("allocator")
def test_allocator(benchmark: Callable[..., str]):
    out = benchmark("allocator", "--cases", "caption library", "keep_freed_memory")
    assert "| case | 77 MB broadcast add, ms (median) |" in out
    assert "| caption library |" in out and "| keep_freed_memory |" in out and "| torch only |" not in out


@covers("cli_startup")
def test_cli_startup(benchmark: Callable[..., str]):
    out = benchmark("cli_startup", "--repeats", "1", "--commands", "caption --version", "caption evaluate --help")
    assert "| command | median, s |" in out
    assert "| `caption --version` |" in out and "| `caption evaluate --help` |" in out and "fit --help" not in out


@covers("checkpoint_check")
def test_checkpoint_check(benchmark: Callable[..., str]):
    out = benchmark("checkpoint_check", "--megabytes", "1", "--repeats", "1")
    assert "| zip_damage (CRC-32 of every record) |" in out and "| read_checkpoint (both, and its checks) |" in out


@pytest.mark.slow
@covers("coco_shaped", "coco_rehearsal", "rehearsal_clock")
def test_coco_shaped_then_coco_rehearsal(benchmark: Callable[..., str], tmp_path: Path):
    """The rehearsal on the tiniest COCO-shaped data (25 images): the vocabulary, then a `caption fit` of two steps
    timed by the rehearsal's clock callback."""
    out = tmp_path / "rehearsal"
    benchmark("coco_shaped", "--scale", "1/5000", "--out", str(out), "--full_size_images", "2", "--num_workers", "0")
    manifest = json.loads((out / "features" / "manifest.json").read_text())
    assert manifest["complete"] and len(manifest["images"]) == 25
    benchmark("coco_rehearsal", "--scale", "1/5000", "--out", str(out), "--steps", "2", "--stages", "vocabulary",
              "fit_soft")
    results = json.loads((out / "results.json").read_text())
    assert results["vocabulary"]["images"] == 25
    assert results["fit_soft"]["steps"] == 2 and results["fit_soft"]["validation_images"] == 1
    assert results["fit_soft"]["checkpoint_mb"] > 0  # the clock's full checkpoint, saved and timed


@covers("input_pipeline")
def test_input_pipeline(benchmark: Callable[..., str], tmp_path: Path):
    out = tmp_path / "input"
    printed = benchmark("input_pipeline", "--images", "4", "--steps", "2", "--batch-size", "4", "--embed-dim", "8",
                        "--hidden-dim", "16", "--out", str(out))
    assert (out / "features" / "manifest.json").is_file()
    for line in ("caption features (VGG16, 224x224):", "training from the cache:", "training from images:"):
        assert line in printed


@covers("precision_gpu")
def test_precision_gpu_on_the_cpu(benchmark: Callable[..., str]):
    out = benchmark("precision_gpu", "--device", "cpu", "--tiny", "--steps", "1", "--warmup", "1")
    rows = [line for line in out.splitlines() if line.startswith(("| soft |", "| hard |"))]
    assert [row.split(" | ")[1] for row in rows] == ["32-true", "bf16-mixed"] * 2
    searches = [line for line in out.splitlines() if line.startswith("| beam ")]
    assert [row.split(" | ")[:2] for row in searches] == [["| beam 3", "32-true"], ["| beam 3", "bf16-mixed"],
                                                          ["| beam 5", "32-true"], ["| beam 5", "bf16-mixed"]]


@pytest.mark.skipif(torch.cuda.is_available(), reason="refuses only where no GPU is")
def test_precision_gpu_refuses_without_a_gpu(benchmark: Callable[..., str], capsys: pytest.CaptureFixture):
    with pytest.raises(SystemExit) as stopped:
        benchmark("precision_gpu")
    assert stopped.value.code == 2
    assert "no CUDA device here" in capsys.readouterr().err


@pytest.mark.slow
@covers("self_critical")
def test_self_critical(benchmark: Callable[..., str], tmp_path):
    out = benchmark("self_critical", "--smoke", "--out", str(tmp_path / "scst"))
    assert "| ce_soft + SCST (mean_of_others) |" in out and "ce_soft + SCST (mean_of_others): CIDEr-D" in out
    assert (tmp_path / "scst" / "self_critical.json").is_file()


@covers("reward")
def test_reward(benchmark: Callable[..., str]):
    out = benchmark("reward", "--images", "20", "--repeats", "1")
    assert ("| CiderD call, median of 1 more |" in out
            and "| pycocoevalcap Cider().compute_score, 5 calls of 20 images |" in out)
    assert "(agree to 1e-6)" in out


@pytest.mark.slow
@covers("speed", "_helpers")
def test_speed(benchmark: Callable[..., str]):
    """Every section but `input` (test_input_pipeline runs its script), one timed step or run of each case."""
    out = benchmark("speed", "--quick", "--only", "train", "decode", "padding", "--steps", "1", "--decode-images", "2",
                    "--default-malloc", "--precision", "fp32", "bf16", "--attention", "soft")
    for case in ("train (a) soft fp32", "train (a) soft bf16", "decode (a) greedy fp32", "decode (a) beam 5 bf16"):
        assert f"| {case} |" in out
    assert "bf16 matrix units: " in out and "| train (a) soft | " in out and "| decode (a) beam 3 | " in out
    assert "## padding in one epoch: 566,435 captions" in out and "| 64 | 0.00% |" in out


@covers("validation_scoring")
def test_validation_scoring(benchmark: Callable[..., str]):
    out = benchmark("validation_scoring", "--images", "2", "--repeats", "1")
    assert out.count("\n| ") == 5  # the header and the four ways
    assert "| later epoch, captions seen before (no Java) |" in out


@pytest.mark.slow
@covers("positions", "two_stage", "word_costs")
def test_positions_then_word_costs(benchmark: Callable[..., str], tmp_path: Path):
    """The smoke run of the three stages, then the word costs of its soft run, as docs/measurements.md has them."""
    data, runs = tmp_path / "data", tmp_path / "runs"
    printed = benchmark("positions", "--smoke", "--data", str(data), "--out", str(runs))
    assert "# positions benchmark" in printed and "hard − soft BLEU-4:" in printed
    results = json.loads((runs / "positions.json").read_text())
    assert set(results) == {"encoder", "soft", "hard"} and "accuracy" in results["encoder"]
    assert all("bleu4" in results[stage] for stage in ("soft", "hard"))
    assert "encoder stage: held-out object accuracy" in printed
    classes = ["kind=cross,ring,bar,diamond", "colour=purple,orange,black,cyan", "place=top,bottom,left,right,center"]
    costs = json.loads(benchmark("word_costs", str(runs / "soft" / "checkpoints" / "last.ckpt"), str(data),
                                 "--classes", *classes, "--images", "4"))
    assert costs["kind"]["words"] > 0 and set(costs["kind"]) == {"words", "nll", "peak_in_box", "peak_on_edge"}


@covers("silhouettes")
def test_silhouettes(benchmark: Callable[..., str], tmp_path: Path):
    """Its dataset at the smoke run's size (the two stages of its smoke run are test_positions_then_word_costs')."""
    printed = benchmark("silhouettes", "--smoke", "--generate-only", "--data", str(tmp_path / "data"))
    assert printed.startswith("wrote ")
    dataset = json.loads((tmp_path / "data" / "dataset_silhouettes.json").read_text())
    assert len(dataset["images"]) == 16


@pytest.mark.slow
@covers("shapes")
def test_shapes(benchmark: Callable[..., str], tmp_path: Path):
    """The smoke run of the shipped stages: the encoder, soft on it, then hard on soft's encoder (scored with argmax
    decoding too)."""
    printed = benchmark("shapes", "--smoke", "--out", str(tmp_path / "runs"))
    assert "stage 0: held-out object accuracy" in printed
    rows = {row["name"]: row for row in json.loads((tmp_path / "runs" / "shapes.json").read_text())}
    assert set(rows) == {"soft", "hard"} and "bleu4_argmax" in rows["hard"]
    assert "| soft | `shapes_soft` as shipped (stage 1) | 1 |" in printed


@pytest.mark.slow
@covers("seeds")
def test_seeds(benchmark: Callable[..., str], tmp_path: Path):
    """Two tiny seeds of soft and hard, then `caption compare` of the groups on test at beam sizes 1 and 2: the table
    of intervals and the paired test, from comparison.json, and grounding against beam size."""
    printed = benchmark("seeds", "--smoke", "--splits", "test", "--beam_sizes", "1", "2", "--out",
                        str(tmp_path / "seeds"))
    assert "| shapes | cross-entropy | soft | " in printed and "| | | hard − soft (paired, 95%) | " in printed
    assert "| shapes | cross-entropy | test | hard | 2 | " in printed, "grounding against beam size"
    about = json.loads((tmp_path / "seeds" / "seeds.json").read_text())
    groups = about["comparisons"]["cross-entropy-test"]["groups"]
    assert [group["name"] for group in groups] == ["soft", "hard"] and all(group["seeds"] == 2 for group in groups)


@pytest.mark.slow
@covers("decoding")
def test_decoding(benchmark: Callable[..., str], tmp_path: Path):
    printed = benchmark("decoding", "--smoke", "--out", str(tmp_path / "decoding"))
    for decoding in ("greedy", "beam 3", "beam 3, length penalty 1", "beam 3, focus", "beam 3, MMI 0.5"):
        assert f"| {decoding} | " in printed
    assert "decoding.json" in {path.name for path in (tmp_path / "decoding").iterdir()}


@covers("box_supervision")
def test_box_supervision(benchmark: Callable[..., str], tmp_path: Path):
    printed = benchmark("box_supervision", "--smoke", "--out", str(tmp_path / "boxes"))
    assert "| with | 0 | " in printed and "| with | mean | " in printed
    written = json.loads((tmp_path / "boxes" / "box_supervision.json").read_text())
    assert written["weight"] == 1.0 and set(written["with"]["0"]) == {"1", "3"}


STAND_IN_PORT = '''
import torch
from torch import nn


class DecoderWithAttention(nn.Module):
    """The port's interface, a few layers behind it: forward(annotations, captions, lengths) -> its five outputs."""

    def __init__(self, attention_dim, embed_dim, decoder_dim, vocab_size, encoder_dim=2048):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, embed_dim)
        self.score = nn.Linear(encoder_dim, 1)
        self.fc = nn.Linear(embed_dim + encoder_dim, vocab_size)

    def forward(self, encoder_out, encoded_captions, caption_lengths):
        encoder_out = encoder_out.view(encoder_out.size(0), -1, encoder_out.size(-1))
        caption_lengths, sort_ind = caption_lengths.squeeze(1).sort(dim=0, descending=True)
        encoder_out, encoded_captions = encoder_out[sort_ind], encoded_captions[sort_ind]
        decode_lengths = (caption_lengths - 1).tolist()
        steps = max(decode_lengths)
        alphas = self.score(encoder_out).squeeze(-1).softmax(-1)[:, None].expand(-1, steps, -1)
        context = (alphas[:, :1, :, None] * encoder_out[:, None]).sum(2).expand(-1, steps, -1)
        words = self.embedding(encoded_captions[:, :steps])
        return self.fc(torch.cat([words, context], -1)), encoded_captions, decode_lengths, alphas, sort_ind
'''


@pytest.mark.slow
@covers("port")
def test_port_beside_a_stand_in_for_the_port(benchmark: Callable[..., str], tmp_path: Path):
    """The script's real run, with a stand-in of the port's interface where a clone of it would be."""
    (tmp_path / "port").mkdir()
    (tmp_path / "port" / "models.py").write_text(STAND_IN_PORT)
    out = benchmark("port", "--port", str(tmp_path / "port"), "--steps", "1")
    assert "| port (fp32, mixed lengths) |" in out and "| 1.00x |" in out
    assert "| ours (fp32, same-length batches) |" in out and "| ours (fp32, mixed lengths) |" in out
