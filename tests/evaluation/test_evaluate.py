"""coco-caption evaluation, attention accuracy, `caption evaluate` and `caption compare`."""

import json
import math
import re
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch
import yaml
from kit.cli import failed
from pycocoevalcap.bleu.bleu import Bleu
from pycocoevalcap.cider.cider import Cider
from pycocoevalcap.meteor.meteor import Meteor
from pycocoevalcap.rouge.rouge import Rouge
from pycocoevalcap.tokenizer.ptbtokenizer import PTBTokenizer
from pycocotools.coco import COCO

from caption.cli import main
from caption.data.sources.records import ObjectBox
from caption.data.synthetic.shapes import KINDS, ShapesSource
from caption.evaluation import meteor, metrics, ptb_tokenizer
from caption.evaluation.grid import attention_grid, location_center
from caption.evaluation.grounding import Localisation, localisation, mean_entropy, step_entropy
from caption.evaluation.hallucination import Hallucination
from caption.evaluation.metrics import coco_scores
from caption.inference import Evaluation, load_trained, write_evaluation
from caption.model.captions import Caption
from caption.reports.table import dataset_name, results_table

CANDIDATES = {
    7: "A large red circle, left of a small blue square.",
    8: "the Square is BLUE",
    9: "",  # a model may say nothing at all
}
REFERENCES = {
    7: ["A large red circle left of a small blue square.", "There's a red circle and a blue square!"],
    8: ["a small blue square is right of a large red circle", "the square is right of the circle"],
    9: ["a green triangle", "there is a small green triangle"],
}


def pycocoevalcap_directly(candidates, references):
    """The official recipe: PTB-tokenise results and references separately, then each scorer."""
    tokenizer = PTBTokenizer()
    gts = tokenizer.tokenize({key: [{"caption": c} for c in value] for key, value in references.items()})
    res = tokenizer.tokenize({key: [{"caption": c}] for key, c in candidates.items()})
    bleu, _ = Bleu(4).compute_score(gts, res)
    return {
        "bleu1": bleu[0], "bleu2": bleu[1], "bleu3": bleu[2], "bleu4": bleu[3],
        "meteor": Meteor().compute_score(gts, res)[0],
        "rouge_l": Rouge().compute_score(gts, res)[0],
        "cider": Cider().compute_score(gts, res)[0],
    }


def test_scores_equal_pycocoevalcap_called_directly():
    assert coco_scores(CANDIDATES, REFERENCES) == (pycocoevalcap_directly(CANDIDATES, REFERENCES),
                                                   ptb_tokenizer.PTB_JAVA)


class NoJava:
    def __init__(self):
        raise FileNotFoundError("[Errno 2] No such file or directory: 'java'")


class HangingMeteor:
    """A METEOR whose Java process never answers (until it is killed)."""

    def __init__(self):
        self.meteor_p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])

    def compute_score(self, references, candidates):
        self.meteor_p.wait()
        return 0.5, []


@pytest.mark.parametrize("broken, timeout", [(NoJava, 60.0), (HangingMeteor, 0.5)])
def test_meteor_missing_or_hanging_is_reported_missing_and_the_rest_still_scored(monkeypatch, broken, timeout):
    tokenized = {key: caption.lower() for key, caption in {1: "a red circle", 2: "a square"}.items()}
    references = {1: ["a red circle", "the circle"], 2: ["a blue square", "a square"]}
    monkeypatch.setattr(meteor, "Meteor", broken)
    reason = "FileNotFoundError: .* 'java'" if broken is NoJava else "no answer within 0.5 s"
    with pytest.warns(UserWarning, match=f"METEOR is missing \\({reason}\\)"):
        scores = metrics.score_captions(tokenized, references, meteor_timeout=timeout)
    assert math.isnan(scores["meteor"])
    hypotheses = {key: [caption] for key, caption in tokenized.items()}
    assert scores["bleu4"] == Bleu(4).compute_score(references, hypotheses)[0][3]
    assert scores["cider"] == Cider().compute_score(references, hypotheses)[0]

    evaluation = Evaluation("test", 3, scores, {})
    assert evaluation.metrics()["metrics"]["meteor"] is None, "missing is null in metrics.json"
    assert re.search(r"METEOR +missing", evaluation.table())


def generated(image_id, caption, locations=64):
    words = caption.split()
    alpha = torch.full((len(words), locations), 1 / locations)
    return image_id, Caption(caption, words, alpha, torch.ones(len(words)), None, -1.0)


def test_results_file_is_in_the_coco_results_format(tmp_path):
    evaluation = Evaluation("test", 3, {}, dict([generated(7, "a red circle"), generated(8, "")]))
    write_evaluation(evaluation, tmp_path, checkpoint="x.ckpt")
    coco = COCO()
    coco.dataset = {
        "images": [{"id": 7}, {"id": 8}, {"id": 9}],
        "annotations": [{"id": 1, "image_id": i, "caption": "a shape"} for i in (7, 8, 9)],
    }
    coco.createIndex()
    results = coco.loadRes(str(tmp_path / "captions.json"))
    assert sorted(results.getImgIds()) == [7, 8]
    assert results.imgToAnns[7][0]["caption"] == "a red circle"
    assert json.loads((tmp_path / "metrics.json").read_text())["checkpoint"] == "x.ckpt"


def test_attention_grid_and_cell_centres():
    assert attention_grid(196, (224, 224)) == (14, 14)
    assert attention_grid(8, (32, 64)) == (2, 4)
    assert location_center(5, (2, 4), (32, 64)) == (24.0, 24.0)  # row 1, column 1 of 16-pixel cells
    with pytest.raises(ValueError, match="do not form a grid"):
        attention_grid(7, (64, 64))


def test_localisation_against_hand_made_attention_and_boxes():
    circle = ObjectBox("circle", (0, 0, 16, 16))  # holds the centres of cells 0, 1, 8, 9
    square = ObjectBox("square", (40, 40, 60, 60))  # cells 45, 46, 53, 54 (centres 44, 52)
    alpha = torch.zeros(7, 64)
    alpha[:, 63] = 0.5  # the peak decides, not the rest
    alpha[1, 9] = 0.9  # "circle": peak at (12, 12), inside the circle's box -> on the named object
    alpha[3, 54] = 0.9  # "square": peak at (52, 52), inside -> on the named object
    alpha[4, 0] = 0.9  # "square" again: peak at (4, 4), inside the circle -> on another object
    alpha[5, 9] = 0.9  # "triangle": the image holds none -> absent, a miss
    # row 6, "circle": peak at cell 63, (60, 60), outside both boxes -> background
    words = ["red", "circle", "left", "square", "square", "triangle", "circle"]
    kinds = {kind: kind for kind in ("circle", "square", "triangle")}  # each names itself
    found = localisation([(words, alpha, (circle, square))], image_size=(64, 64), word_labels=kinds)
    assert found.nouns == 5 and found.accuracy == 2 / 5
    assert (found.other_object, found.background, found.absent) == (1 / 5, 1 / 5, 1 / 5)
    # a uniformly random location: each box holds 4 of the 64 cell centres; the absent noun scores 0
    assert found.chance_location == pytest.approx(4 * 4 / 64 / 5)
    assert found.chance_object == pytest.approx(4 * 0.5 / 5)  # a peak on one of the two objects, at random
    assert set(found.scores()) == {"attention_accuracy", "attention_other_object", "attention_background",
                                   "attention_absent", "attention_chance_location", "attention_chance_object",
                                   "attention_correctness", "attention_chance_correctness"}
    # box edges: x1/y1 are exclusive, so a centre on x1 is outside
    edge = ObjectBox("circle", (0, 0, 12, 12))
    assert localisation([(["circle"], alpha[1:2], (edge,))], image_size=(64, 64), word_labels=kinds).accuracy == 0
    nothing = localisation([(["a", "shape"], alpha[:2], (circle,))], image_size=(64, 64), word_labels=kinds)
    assert nothing.nouns == 0 and all(math.isnan(value) for value in nothing.scores().values())
    wide = ObjectBox("square", (0, 0, 64, 32))  # the top half: 32 of 64 centres
    found = localisation([(["circle", "square"], alpha[:2], (circle, wide))], image_size=(64, 64), word_labels=kinds)
    assert found.chance_location == (4 / 64 + 32 / 64) / 2


def test_alpha_entropy_per_step():
    uniform, peaked = torch.full((2, 64), 1 / 64), torch.eye(64)[:3]
    assert torch.allclose(step_entropy(uniform), torch.full((2,), math.log(64)))
    assert torch.equal(step_entropy(peaked), torch.zeros(3))
    assert mean_entropy([step_entropy(uniform), step_entropy(peaked)]) == pytest.approx(2 * math.log(64) / 5)
    assert math.isnan(mean_entropy([]))


def test_paper_numbers_sit_beside_ours_for_the_same_dataset():
    models = [SimpleNamespace(name=kind, settings=SimpleNamespace(attention=SimpleNamespace(kind=kind)))
              for kind in ("soft", "hard")]
    scores = dict.fromkeys(metrics.METRICS, 0.5) | {"meteor": float("nan")}
    found = Localisation(nouns=10, accuracy=0.25, other_object=0.5, background=0.25, absent=0.0, chance_location=0.07,
                         chance_object=0.5, correctness=0.6, chance_correctness=0.1)
    named = Hallucination(captions=3, mentions=10, hallucinated_mentions=2, hallucinated_captions=1)
    evaluations = [Evaluation("test", 3, scores, {}),
                   Evaluation("test", 3, scores, {}, found, 1.5, hallucination=named)]
    table = results_table(models, evaluations, "coco").splitlines()
    assert table[0].endswith("| attention accuracy | peak on another object | peak on the background "
                             "| noun of an absent object | random location | random object | attention correctness "
                             "| uniform α's correctness | CHAIR-i | CHAIR-s | α entropy per step (nats) |")
    assert table[2] == "| soft (ours) | 50.0 | 50.0 | 50.0 | 50.0 | missing | 50.0 | 50.0 |" + " – |" * 11
    assert table[3] == ("| hard (ours) | 50.0 | 50.0 | 50.0 | 50.0 | missing | 50.0 | 50.0 | 25.0 | 50.0 | 25.0 | 0.0 "
                        "| 7.0 | 50.0 | 60.0 | 10.0 | 20.0 | 33.3 | 1.50 |")
    assert table[4] == "| soft (paper, Table 1) | 70.7 | 49.2 | 34.4 | 24.3 | 23.90 |" + " – |" * 13
    assert table[5] == "| hard (paper, Table 1) | 71.8 | 50.4 | 35.7 | 25.0 | 23.04 |" + " – |" * 13
    assert len(results_table(models, evaluations, "shapes").splitlines()) == 4, "no paper numbers for the built-in data"


def test_dataset_is_recognised_from_the_data_settings():
    karpathy = {"class_path": "caption.data.sources.karpathy.KarpathySource", "init_args": {}}
    def named(annotations):
        return dataset_name({"source": karpathy | {"init_args": {"annotations": annotations}}})

    assert named("data/flickr8k/dataset_flickr8k.json") == "flickr8k"
    assert named("data/flickr30k/dataset_flickr30k.json") == "flickr30k"
    assert named("data/coco/dataset_coco.json") == "coco"
    assert named("mine.json") is None
    assert dataset_name({"source": {"class_path": "caption.data.synthetic.shapes.ShapesSource",
                                    "init_args": {}}}) == "shapes"


def shapes_source(checkpoint):
    settings = torch.load(checkpoint, weights_only=True)["datamodule_hyper_parameters"]["source"]
    return ShapesSource(**settings["init_args"])


def hits_by_hand(checkpoint, records) -> tuple[int, int]:
    """Attention accuracy's numerator and denominator, computed apart from `caption evaluate`: each test image captioned
    by the trained model alone (the checkpoint's beam), and each word naming a shape counted a hit when the centre of
    its α's peak cell (a square grid over the encoder input) lies inside a box of that shape."""
    source, module = shapes_source(checkpoint), load_trained(checkpoint).module
    height, width = source.image_size
    hits = nouns = 0
    for record in records.values():
        with torch.no_grad():
            [caption] = module.generate(module.annotations({"image": source.image(record)[None]})).captions(
                module.vocabulary)
        grid = math.isqrt(caption.alpha.shape[-1])
        for word, alpha in zip(caption.words, caption.alpha):
            if word not in KINDS:
                continue
            nouns += 1
            row, column = divmod(int(alpha.argmax()), grid)
            x, y = (column + 0.5) * width / grid, (row + 0.5) * height / grid
            hits += any(box.label == word and box.box[0] <= x <= box.box[2] and box.box[1] <= y <= box.box[3]
                        for box in source.input_boxes(record))
    return hits, nouns


@pytest.mark.slow
def test_evaluate_writes_pycocoevalcap_scores_of_its_captions(tiny_runs, tmp_path, capsys):
    checkpoint = tiny_runs["soft"] / "checkpoints" / "last.ckpt"
    main(["evaluate", "--ckpt", str(checkpoint), "--split", "test", "--predictions.out", str(tmp_path),
          "--data.eval_batch_size", "3"])
    printed = capsys.readouterr().out
    assert "BLEU-4" in printed and "attention accuracy" in printed
    report = json.loads((tmp_path / "metrics.json").read_text())
    captions = json.loads((tmp_path / "captions.json").read_text())
    records = {r.image_id: r for r in shapes_source(checkpoint).records() if r.split == "test"}
    assert report["images"] == len(captions) == len(records) == 8
    candidates = {entry["image_id"]: entry["caption"] for entry in captions}
    direct = pycocoevalcap_directly(candidates, {i: list(records[i].references) for i in candidates})
    assert {name: report["metrics"][name] for name in direct} == direct
    object_words = sum(word in KINDS for caption in candidates.values() for word in caption.split())
    assert report["object_words"] == object_words
    hits, nouns = hits_by_hand(checkpoint, records)
    assert nouns == object_words
    accuracy = report["metrics"]["attention_accuracy"]
    assert (accuracy is None) if nouns == 0 else accuracy == pytest.approx(hits / nouns)  # null without object words
    # CHAIR by hand: a shape word is hallucinated when neither the image's boxes nor its references hold that shape
    mentions = hallucinated = hallucinating_captions = 0
    for image_id, caption in candidates.items():
        truth = {box.label for box in records[image_id].objects} | {
            word for reference in records[image_id].references for word in re.findall(r"[a-z]+", reference.lower())}
        wrong = [word for word in caption.split() if word in KINDS and word not in truth]
        mentions += sum(word in KINDS for word in caption.split())
        hallucinated, hallucinating_captions = hallucinated + len(wrong), hallucinating_captions + bool(wrong)
    assert report["metrics"]["chair_s"] == hallucinating_captions / len(candidates)
    assert report["metrics"]["chair_i"] == (hallucinated / mentions if mentions else None)
    assert sum(found["hallucinated"] for found in report["hallucination_by_label"].values()) == hallucinated
    present = sum(found["nouns_present"] for found in report["attention_by_label"].values())
    for name in ("attention_correctness", "attention_chance_correctness"):
        assert (report["metrics"][name] is None) if present == 0 else 0 <= report["metrics"][name] <= 1
    assert "CHAIR-i" in printed and "CHAIR-s" in printed
    assert ("attention correctness" in printed) == (object_words > 0), "beside attention accuracy, when scored"

    coco = COCO()
    coco.dataset = {"images": [{"id": i} for i in records],
                    "annotations": [{"id": i, "image_id": i, "caption": records[i].references[0]} for i in records]}
    coco.createIndex()
    assert sorted(coco.loadRes(str(tmp_path / "captions.json")).getImgIds()) == sorted(records)


@pytest.mark.slow
def test_evaluate_data_from_config_and_clear_errors(tiny_runs, tmp_path, capsys, monkeypatch):
    checkpoint = tiny_runs["hard"] / "checkpoints" / "last.ckpt"
    settings = torch.load(checkpoint, weights_only=True)["datamodule_hyper_parameters"]
    settings.pop("_instantiator")
    settings["source"]["init_args"]["num_test"] = 3
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({"model": {"attention": {"kind": "hard"}}, "data": settings}))
    monkeypatch.setattr(meteor, "Meteor", NoJava)  # and METEOR missing: everything else is still written
    with pytest.warns(UserWarning, match="METEOR is missing"):
        main(["evaluate", "--ckpt", str(checkpoint), "--config", str(tmp_path / "config.yaml"),
              "--predictions.out", str(tmp_path / "a")])
    report = json.loads((tmp_path / "a" / "metrics.json").read_text())
    assert report["images"] == 3, "--config overrides the checkpoint's data"
    assert report["metrics"]["meteor"] is None and report["metrics"]["cider"] is not None

    no_data = torch.load(checkpoint, weights_only=True)
    no_data.pop("datamodule_hyper_parameters")
    torch.save(no_data, tmp_path / "no_data.ckpt")
    torch.save({"state_dict": {}}, tmp_path / "foreign.ckpt")
    (tmp_path / "nodata.yaml").write_text("model: {}\n")
    for args, message in [
        (["--ckpt", str(tmp_path / "missing.ckpt")], "missing.ckpt: no such checkpoint file"),
        (["--ckpt", str(tmp_path / "foreign.ckpt")], "not a checkpoint of this project"),
        (["--ckpt", str(tmp_path / "no_data.ckpt")], "pass the training config (--config)"),
        (["--ckpt", str(checkpoint), "--config", str(tmp_path / "nodata.yaml")], "has no `data:` section"),
        (["--ckpt", str(checkpoint), "--model.decoding.beam_size", "0"], "must be >= 1"),
    ]:
        with pytest.raises(SystemExit) as exit_:
            main(["evaluate", *args, "--predictions.out", str(tmp_path / "b")])
        assert message in (capsys.readouterr().err if exit_.value.code == 2 else exit_.value.code)


@pytest.mark.slow
def test_compare_soft_and_hard_writes_report_and_figures(tiny_runs, tmp_path):
    out = tmp_path / "report"
    main(["compare", str(tiny_runs["soft"]), str(tiny_runs["hard"] / "checkpoints" / "last.ckpt"),
          "--predictions.out", str(out), "--images", "2"])
    report = (out / "report.md").read_text()
    for kind in ("soft", "hard"):
        scores = json.loads((out / kind / "metrics.json").read_text())["metrics"]
        row = next(line for line in report.splitlines() if line.startswith(f"| {kind} (ours) |"))
        assert row.split(" | ")[4] == f"{100 * scores['bleu4']:.1f}"
        assert (out / kind / "captions.json").is_file()
    assert "(paper, Table 1)" not in report, "the paper has no numbers for the built-in data"
    figures = sorted(out.glob("overlays-*.png"))
    assert len(figures) == 2 and all(f"]({figure.name})" in report for figure in figures)
    assert (out / "curves.png").is_file() and "](curves.png)" in report
    assert "best-" in report, "a run folder stands for its model-selection checkpoint"
    assert "Grounding against beam size" not in report and not (out / "beam_sizes.json").exists(), "no --beam_sizes"


@pytest.mark.slow
def test_evaluate_at_several_beam_sizes_writes_their_table_figure_and_numbers(tiny_runs, tmp_path, capsys):
    """--beam_sizes: beam 1 is the greedy decoding evaluate reports beside its beam, the checkpoint's beam (3) its own
    evaluation, and beam 2 what a plain `--model.decoding.beam_size 2` run gives; duplicates count once."""
    run, swept, plain = tiny_runs["soft"], tmp_path / "swept", tmp_path / "plain"
    main(["evaluate", "--ckpt_path", str(run), "--predictions.out", str(swept), "--beam_sizes", "2", "1", "3", "2"])
    printed = capsys.readouterr().out
    numbers = json.loads((swept / "beam_sizes.json").read_text())
    assert numbers["beam_sizes"] == [1, 2, 3] and numbers["split"] == "test" and numbers["images"] == 8
    assert numbers["metrics"] == ["bleu4", "cider", "attention_accuracy"], "the built-in data has object boxes"
    [model] = numbers["models"]
    assert model["name"] == "soft" and model["runs"] == ["soft"]
    by_size = {entry["beam_size"]: entry for entry in model["scores"]}
    reported = json.loads((swept / "metrics.json").read_text())
    main(["evaluate", "--ckpt_path", str(run), "--predictions.out", str(plain), "--model.decoding.beam_size", "2"])
    alone = json.loads((plain / "metrics.json").read_text())["metrics"]
    for metric in numbers["metrics"]:
        assert by_size[1][metric]["mean"] == reported["greedy"][metric]
        assert by_size[3][metric]["mean"] == reported["metrics"][metric] and reported["beam_size"] == 3
        assert by_size[2][metric]["mean"] == alone[metric]
        assert by_size[2][metric]["runs"] == [alone[metric]] and by_size[2][metric]["half_width"] is None
    assert (swept / "beam_sizes.png").is_file() and not (plain / "beam_sizes.json").exists()
    assert "| model | beam size | BLEU-4 | CIDEr | attention accuracy |" in printed
    bleu4 = by_size[2]["bleu4"]["mean"]
    assert f"| soft | 2 | {100 * bleu4:.1f} | " in printed


@pytest.mark.parametrize("command", [["evaluate", "--ckpt_path", "runs/missing"], ["compare", "runs/missing"]])
def test_a_beam_size_below_one_is_refused_in_one_line_before_any_work(command, tmp_path):
    line = failed([*command, "--beam_sizes", "3", "0", "-1", "--predictions.out", str(tmp_path / "out")])
    assert "--beam_sizes must each be >= 1, got 0 -1" in line
    assert not (tmp_path / "out").exists()
