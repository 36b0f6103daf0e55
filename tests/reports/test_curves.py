"""The panels of `caption compare`'s curves for soft against hard attention: the negative log-likelihood both
objectives share on one panel, never their losses; each objective's own terms on panels of their own, drawn for the
runs that log them; the attention accuracy's chance levels as dashed reference lines on its panel, one per run in
the run's colour, and no panel of their own; groups of seeds keep their band."""

import numpy as np
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import to_rgb

from caption.reports.figures import CHANCE_LEVELS, CHANCE_PANELS, constant_curves, curves_figure


def logged(nll: list[float], **terms: list[float]) -> dict[str, list[tuple[int, float]]]:
    steps = [0, 50, 100]
    curves = {"train/nll": list(zip(steps, nll))} | {f"train/{name}": list(zip(steps, values))
                                                     for name, values in terms.items()}
    return curves | {"val/attention_accuracy": [(100, 0.4)], "val/attention_chance_location": [(100, 0.05)],
                     "val/attention_chance_object": [(100, 0.3)], "val/bleu4": [(100, 0.2)]}


SOFT = logged([30.0, 20.0, 15.0], doubly_stochastic=[2.0, 1.0, 0.5])
HARD = logged([32.0, 25.0, 18.0], doubly_stochastic=[3.0, 2.0, 1.0], reinforce=[-275.0, 10.0, 70.0],
              entropy=[40.0, 30.0, 20.0], baseline=[-30.0, -25.0, -20.0])


def panels(figure) -> dict:
    return {ax.get_title(): ax for ax in figure.axes if ax.get_visible()}


def curve_labels(ax) -> list[str]:
    return [line.get_label() for line in ax.get_lines() if line.get_gid() not in CHANCE_LEVELS]


def test_soft_and_hard_share_the_likelihood_and_each_objective_keeps_its_own_terms():
    drawn = panels(curves_figure({"soft": SOFT, "hard": HARD}))
    assert list(drawn)[:2] == ["train/nll", "val/bleu4"], "the likelihood first"
    assert curve_labels(drawn["train/nll"]) == ["soft", "hard"]
    assert curve_labels(drawn["train/doubly_stochastic"]) == ["soft", "hard"]
    for term in ("train/reinforce", "train/entropy", "train/baseline"):
        assert curve_labels(drawn[term]) == ["hard"], f"{term}: only the run that logs it"
    assert not set(CHANCE_LEVELS) & set(drawn), "chance levels are no curves"


def test_chance_levels_are_reference_lines_on_the_accuracy_panel():
    ax = panels(curves_figure({"soft": SOFT, "hard": HARD}))["val/attention_accuracy"]
    colours = {line.get_label(): line.get_color() for line in ax.get_lines() if line.get_gid() is None}
    for name in CHANCE_PANELS["val/attention_accuracy"]:
        kind, _ = CHANCE_LEVELS[name]
        lines = [line for line in ax.get_lines() if line.get_gid() == name]
        assert [line.get_color() for line in lines] == [colours["soft"], colours["hard"]], "in each run's colour"
        for line in lines:
            assert list(line.get_ydata()) == [SOFT[name][-1][1]] * 2, "horizontal, at the last validation's level"
            assert line.get_linestyle() != "-", "dashed"
        named = [text.get_text() for text in ax.get_legend().get_texts() if text.get_text().startswith(kind)]
        assert len(named) == 1, "named once in the legend"
    assert "soft" in [text.get_text() for text in ax.get_legend().get_texts()]


def test_uniform_alphas_correctness_is_a_reference_line_on_the_correctness_panel_only():
    correct = {"val/attention_correctness": [(50, 0.3), (100, 0.5)], "val/attention_chance_correctness": [(100, 0.12)]}
    drawn = panels(curves_figure({"soft": SOFT | correct}))
    assert "val/attention_chance_correctness" not in drawn, "a chance level is no panel"
    ax = drawn["val/attention_correctness"]
    (uniform,) = [line for line in ax.get_lines() if line.get_gid() == "val/attention_chance_correctness"]
    assert list(uniform.get_ydata()) == [0.12] * 2 and uniform.get_color() == ax.get_lines()[0].get_color()
    assert [text.get_text() for text in ax.get_legend().get_texts()] == ["soft", "chance: uniform α 0.12 (below)"]
    accuracy_levels = {line.get_gid() for line in drawn["val/attention_accuracy"].get_lines()} - {None}
    assert accuracy_levels == {"val/attention_chance_location", "val/attention_chance_object"}


def test_groups_of_seeds_draw_their_chance_level_in_the_groups_colour():
    curves = {"soft/seed0": SOFT, "soft/seed1": logged([28.0, 19.0, 14.0], doubly_stochastic=[1.0, 1.0, 1.0])}
    curves["soft/seed1"]["val/attention_chance_location"] = [(100, 0.07)]
    ax = panels(curves_figure(curves, {"soft": ["soft/seed0", "soft/seed1"]}))["val/attention_accuracy"]
    assert curve_labels(ax) == ["soft (mean of 2 runs)"]
    (location,) = [line for line in ax.get_lines() if line.get_gid() == "val/attention_chance_location"]
    assert location.get_ydata()[0] == pytest.approx(0.06), "the mean of the group's runs"
    assert location.get_color() == ax.get_lines()[0].get_color()


def test_hard_attentions_reward_and_self_critical_cider_are_on_panels_of_their_own():
    """Hard's train/reward is eq. 12's log-likelihood (about -2), SCST's train/cider a CIDEr-D (about 1): one axis
    for both would tell nothing; each panel's axis says what its quantity is."""
    scst = logged([20.0, 19.0, 18.0], cider=[0.8, 1.0, 1.2], cider_baseline=[0.8, 0.9, 1.1],
                  advantage_std=[0.3, 0.2, 0.2], advantage_positive=[0.5, 0.4, 0.5], sample_length=[9.0, 9.5, 10.0])
    hard = logged([32.0, 25.0, 18.0], reward=[-2.5, -2.2, -2.0], baseline=[-2.6, -2.3, -2.1])
    drawn = panels(curves_figure({"hard": hard, "scst": scst}))
    assert curve_labels(drawn["train/reward"]) == ["hard"] and curve_labels(drawn["train/baseline"]) == ["hard"]
    for term in ("train/cider", "train/cider_baseline", "train/advantage_std", "train/advantage_positive",
                 "train/sample_length"):
        assert curve_labels(drawn[term]) == ["scst"], f"{term}: the self-critical run's own panel"
    assert "log-likelihood" in drawn["train/reward"].get_ylabel()
    assert "CIDEr-D" in drawn["train/cider"].get_ylabel() and "SCST" in drawn["train/cider_baseline"].get_ylabel()


def accuracy_run(accuracy: list[float], *, location: float, chance_object: float,
                 dangling: list[float]) -> dict[str, list[tuple[int, float]]]:
    """A run's validation curves at steps 100..400: attention accuracy, its chance levels, the dangling endings."""
    steps = [100, 200, 300, 400]
    return {"train/nll": [(0, 30.0), (400, 10.0)], "val/attention_accuracy": list(zip(steps, accuracy)),
            "val/attention_chance_location": [(step, location) for step in steps],
            "val/attention_chance_object": [(step, chance_object) for step in steps],
            "val/dangling_ending": list(zip(steps, dangling))}


def pixels_of(figure, ax, level: float) -> np.ndarray:
    """The RGB pixels of `figure`, drawn, along the rows of `ax` at y = `level` (and the rows above and below it, which
    a thin line may fall on), inside the axes: (3 × columns, 3)."""
    canvas = FigureCanvasAgg(figure)
    canvas.draw()
    image = np.asarray(canvas.buffer_rgba())[..., :3].astype(int)
    (x0, _), (x1, y) = ax.transData.transform([(ax.get_xlim()[0], level), (ax.get_xlim()[1], level)])
    row = image.shape[0] - 1 - int(round(y))  # display coordinates count from the bottom
    return image[row - 1:row + 2, int(x0) + 2:int(x1) - 2].reshape(-1, 3)


def nearest(pixels: np.ndarray, colours: dict[str, str]) -> dict[str, int]:
    """How many of `pixels` are nearer each of `colours` ({label: colour}) than to the others and to white."""
    references = np.array([to_rgb(colour) for colour in [*colours.values(), "white"]]) * 255  # (C + 1, 3)
    closest = np.abs(pixels[:, None, :] - references[None]).sum(-1).argmin(1)
    return {label: int((closest == index).sum()) for index, label in enumerate(colours)}


def test_chance_lines_of_runs_at_one_level_all_show_in_their_colours():
    soft = accuracy_run([0.2, 0.3, 0.35, 0.4], location=0.3, chance_object=0.25, dangling=[0.0, 0.1, 0.0, 0.0])
    hard = accuracy_run([0.18, 0.25, 0.31, 0.33], location=0.3, chance_object=0.25, dangling=[0.0] * 4)
    figure = curves_figure({"soft": soft, "hard": hard})
    ax = panels(figure)["val/attention_accuracy"]
    colours = {line.get_label(): line.get_color() for line in ax.get_lines() if line.get_gid() is None}
    for level in (0.25, 0.3):  # random object, random location: both runs' lines at one level
        row = pixels_of(figure, ax, level)
        found = nearest(row, colours)
        assert min(found.values()) > 0.05 * len(row), f"each run's line shows along the row: {level}, {found}"


def test_the_axis_fits_the_curves_and_a_chance_level_off_it_is_named_with_its_value():
    soft = accuracy_run([0.80, 0.86, 0.88, 0.90], location=0.06, chance_object=0.5, dangling=[0.0] * 4)
    hard = accuracy_run([0.78, 0.84, 0.87, 0.875], location=0.06, chance_object=0.5, dangling=[0.0] * 4)
    ax = panels(curves_figure({"soft": soft, "hard": hard}))["val/attention_accuracy"]
    low, high = ax.get_ylim()
    assert 0.7 < low < 0.78 and 0.9 < high < 0.95, "the range where the runs differ fills the panel"
    legend = [text.get_text() for text in ax.get_legend().get_texts()]
    assert legend == ["soft", "hard", "chance: random location 0.06 (below)", "chance: random object 0.50 (below)"]


def test_a_quantity_constant_for_every_run_gets_no_panel():
    soft = accuracy_run([0.80, 0.86, 0.88, 0.90], location=0.06, chance_object=0.5, dangling=[0.0] * 4)
    hard = accuracy_run([0.78, 0.84, 0.87, 0.875], location=0.06, chance_object=0.5, dangling=[0.0] * 4)
    assert constant_curves({"soft": soft, "hard": hard}) == {"val/dangling_ending": 0.0}
    assert list(panels(curves_figure({"soft": soft, "hard": hard}))) == ["train/nll", "val/attention_accuracy"]
    soft["val/dangling_ending"][1] = (200, 0.1)
    assert "val/dangling_ending" in panels(curves_figure({"soft": soft, "hard": hard})), "one run moves: a panel"
    one_validation = {"soft": {"val/bleu4": [(10, 0.0)], "train/nll": [(0, 3.0), (10, 2.0)]}}
    assert constant_curves(one_validation) == {}, "a single point is drawn"
