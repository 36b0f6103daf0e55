"""The habits self-critical training may teach, counted by hand on a few captions, and said only when the captions
have clearly more of them than the references."""

import math

from caption.evaluation.degeneration import habit_warnings, habits

CAPTIONS = [
    "a red circle and a".split(),               # dangling
    "a red circle a red circle".split(),        # repeats the trigram "a red circle"
    "a blue square above a red circle".split(),
    "a blue square above a red circle".split(),  # the same caption again
]
REFERENCES = [
    "a red circle left of a green square".split(),
    "a red circle below a blue triangle".split(),
    "a blue square above a red circle".split(),
    "two shapes on a dark canvas".split(),
]


def test_each_habit_is_the_share_of_captions_that_have_it():
    found = habits(CAPTIONS)
    assert found == {"dangling_ending": 0.25, "repeated_trigram": 0.25, "distinct_captions": 0.75}
    assert habits(REFERENCES) == {"dangling_ending": 0.0, "repeated_trigram": 0.0, "distinct_captions": 1.0}
    assert habits([[]])["dangling_ending"] == 0.0 and math.isnan(habits([])["distinct_captions"])


def test_a_habit_is_said_in_one_line_naming_its_figure_only_beyond_the_references():
    lines = habit_warnings(habits(CAPTIONS), habits(REFERENCES), split="test")
    assert len(lines) == 2 and "(dangling_ending)" in lines[0] and "(repeated_trigram)" in lines[1]
    assert "25.0% of the test captions" in lines[0] and "references: 0.0%" in lines[0]
    assert habit_warnings(habits(CAPTIONS), habits(CAPTIONS), split="test") == []  # the references' own habits
    collapsed = [CAPTIONS[2]] * 4
    (line,) = habit_warnings(habits(collapsed), habits(REFERENCES), split="val")
    assert line.startswith("distinct_captions: only 25.0% of the val captions differ (references: 100.0%)")
