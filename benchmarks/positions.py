"""Soft against hard attention on a second synthetic dataset, in the real formats: other objects, other layouts, and
captions that name where each object is.

    python benchmarks/positions.py                      # generate data/positions, train soft then hard, score both
    python benchmarks/positions.py --generate-only      # just the dataset
    python benchmarks/positions.py --train 1000 --out runs/positions_1000   # a smaller training split
    python benchmarks/positions.py --smoke              # a tiny run, to check it works (positions_smoke)

The data (`caption.data.synthetic.positions`): 1 to 3 objects (cross, ring, bar, diamond; purple, orange, black, cyan)
on a light 64×64 canvas, each in its own cell of a 3×3 layout, five captions per image such as "a purple cross in the
top left and an orange ring in the center"; 3,000 / 200 / 200 images. Written as

    data/positions/images/00000.png ...
    data/positions/dataset_positions.json      Karpathy's format
    data/positions/instances_positions.json    COCO's instances format: each object's box, labelled by its kind

and read as real data is, by `caption.data.sources.karpathy.KarpathySource` with that instances file, so attention
accuracy is scored on the kinds. Training and scoring: benchmarks/two_stage.py (`shapes_soft`, then `shapes_hard` on the
soft run's encoder; only the data and `model.decoding.max_caption_length` 24 swapped in). Writes
runs/positions/positions.json and prints a table.
"""

from two_stage import main

from caption.data.synthetic.positions import CAPTION_LENGTH, NAME, SIZE, generate

if __name__ == "__main__":
    main(name=NAME, description=__doc__, generate=generate, image_size=SIZE, caption_length=CAPTION_LENGTH)
