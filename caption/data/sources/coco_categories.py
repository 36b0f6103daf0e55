"""Which caption words name which of COCO's 80 object categories: the map attention accuracy needs on COCO.

`SYNONYMS`: each category name of COCO's `instances_*.json` (in id order) with the words captions use for it, written
by hand in the spirit of the CHAIR metric's synonym list (Rohrbach et al., EMNLP 2018): person by man, woman, boy, ...;
bicycle by bike. Each name is a caption token or a two-word phrase and counts in its plural too (`plural`,
`IRREGULAR`); a word that names two categories in common captions is left out. The rules, and the words left out:
docs/datasets.md#boxes-for-attention-accuracy.
"""

from __future__ import annotations

COCO_CATEGORIES = (
    "person", "bicycle", "car", "motorcycle", "airplane", "bus", "train", "truck", "boat", "traffic light",
    "fire hydrant", "stop sign", "parking meter", "bench", "bird", "cat", "dog", "horse", "sheep", "cow",
    "elephant", "bear", "zebra", "giraffe", "backpack", "umbrella", "handbag", "tie", "suitcase", "frisbee",
    "skis", "snowboard", "sports ball", "kite", "baseball bat", "baseball glove", "skateboard", "surfboard",
    "tennis racket", "bottle", "wine glass", "cup", "fork", "knife", "spoon", "bowl", "banana", "apple",
    "sandwich", "orange", "broccoli", "carrot", "hot dog", "pizza", "donut", "cake", "chair", "couch",
    "potted plant", "bed", "dining table", "toilet", "tv", "laptop", "mouse", "remote", "keyboard", "cell phone",
    "microwave", "oven", "toaster", "sink", "refrigerator", "book", "clock", "vase", "scissors", "teddy bear",
    "hair drier", "toothbrush",
)

# category -> the other words (singular) that captions name it by
SYNONYMS: dict[str, tuple[str, ...]] = {
    "person": ("man", "woman", "boy", "girl", "child", "kid", "baby", "toddler", "infant", "guy", "lady",
               "gentleman", "adult", "teenager", "teen", "player", "skier", "surfer", "skateboarder",
               "snowboarder", "rider", "biker", "cyclist", "pedestrian", "chef", "worker", "officer",
               "policeman", "soldier", "batter", "pitcher", "catcher", "umpire", "mother", "father", "daughter",
               "son", "brother", "sister", "friend", "couple", "family", "student", "tourist", "spectator"),
    "bicycle": ("bike",),
    "car": ("automobile", "taxi", "cab", "sedan", "suv", "jeep"),
    "motorcycle": ("motorbike", "motor bike", "moped", "scooter", "dirt bike"),
    "airplane": ("plane", "airliner", "aeroplane", "aircraft", "jet", "jetliner"),
    "bus": ("minibus",),
    "train": ("locomotive", "tram", "subway"),
    "truck": ("pickup", "lorry", "firetruck", "fire truck"),
    "boat": ("ship", "sailboat", "yacht", "canoe", "kayak", "ferry", "raft"),
    "traffic light": ("stoplight", "traffic signal", "street light"),
    "fire hydrant": ("hydrant",),
    "parking meter": ("meter",),
    "bird": ("duck", "pigeon", "seagull", "gull", "goose", "parrot", "swan", "owl", "sparrow"),
    "cat": ("kitten", "kitty"),
    "dog": ("puppy", "pup", "doggy"),
    "horse": ("pony", "foal", "stallion", "mare"),
    "sheep": ("lamb", "ram"),
    "cow": ("cattle", "calf", "bull", "ox"),
    "backpack": ("rucksack", "knapsack"),
    "umbrella": ("parasol",),
    "handbag": ("purse", "hand bag"),
    "tie": ("necktie",),
    "suitcase": ("luggage", "baggage"),
    "skis": ("ski",),
    "snowboard": ("snow board",),
    "sports ball": ("ball", "soccer ball", "tennis ball", "football", "basketball", "volleyball"),
    "baseball bat": ("bat",),
    "baseball glove": ("glove", "mitt"),
    "skateboard": ("skate board",),
    "surfboard": ("surf board",),
    "tennis racket": ("racket", "racquet", "tennis racquet"),
    "wine glass": ("wineglass",),
    "cup": ("mug", "teacup"),
    "sandwich": ("burger", "hamburger", "panini"),
    "orange": ("oranges",),
    "hot dog": ("hotdog",),
    "donut": ("doughnut",),
    "cake": ("cupcake",),
    "chair": ("stool",),
    "couch": ("sofa",),
    "potted plant": ("plant", "houseplant"),
    "dining table": ("table",),
    "tv": ("television", "monitor"),
    "remote": ("remote control", "controller"),
    "cell phone": ("phone", "cellphone", "smartphone", "telephone"),
    "oven": ("stove",),
    "refrigerator": ("fridge",),
    "teddy bear": ("teddy", "stuffed animal"),
    "hair drier": ("hair dryer", "hairdryer", "blow dryer", "dryer", "drier"),
    "toothbrush": ("tooth brush",),
}

LEFT_OUT = frozenset({"orange"})  # names that captions mostly use for something else (see the rules above)

# singular -> plural where the -s rule does not hold; plural-only and mass nouns stay as they are
IRREGULAR = {
    "person": "people", "man": "men", "woman": "women", "child": "children", "gentleman": "gentlemen",
    "policeman": "policemen", "mouse": "mice", "goose": "geese", "knife": "knives", "calf": "calves",
    "ox": "oxen", "sheep": "sheep", "cattle": "cattle", "skis": "skis", "scissors": "scissors", "broccoli": "broccoli",
    "luggage": "luggage", "baggage": "baggage", "oranges": "oranges", "aircraft": "aircraft",
}


def plural(name: str) -> str:
    """The plural of a one- or two-word name (its last word inflected): "bike" -> "bikes", "hot dog" -> "hot dogs"."""
    *head, word = name.split(" ")
    if word in IRREGULAR:
        inflected = IRREGULAR[word]
    elif word.endswith(("s", "x", "z", "ch", "sh")):
        inflected = word + "es"
    elif word.endswith("y") and word[-2:-1] not in "aeiou":
        inflected = word[:-1] + "ies"
    else:
        inflected = word + "s"
    return " ".join([*head, inflected])


def coco_word_labels() -> dict[str, str]:
    """Caption word or two-word phrase -> COCO category name, singular and plural forms of every name."""
    labels: dict[str, str] = {}
    for category in COCO_CATEGORIES:
        for name in (category, *SYNONYMS.get(category, ())):
            for form in (name, plural(name)):
                if labels.get(form, category) != category:
                    raise ValueError(f"{form!r} names both {labels[form]!r} and {category!r}")
                if name not in LEFT_OUT:
                    labels[form] = category
    return labels


COCO_WORD_LABELS = coco_word_labels()
