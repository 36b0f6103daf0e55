"""Soft against hard attention on a third synthetic dataset, unlike the other two: 3 to 5 everyday things drawn as
silhouettes anywhere on a 96×96 canvas, in colours no caption names, with captions that name them and how they lie.

    python benchmarks/silhouettes.py                    # generate data/silhouettes, train soft then hard, score both
    python benchmarks/silhouettes.py --generate-only    # just the dataset
    python benchmarks/silhouettes.py --train 1000 --out runs/silhouettes_1000   # a smaller training split
    python benchmarks/silhouettes.py --smoke            # a tiny run, to check it works (silhouettes_smoke)

The data (`caption.data.synthetic.silhouettes`): house, tree, car, boat, umbrella and table lamp (a category may
repeat), 20 to 26 pixels across, five captions per image naming them left to right, counted ("two houses and a car"), in
pairs ("a house left of a car") and by height ("a house at the top and a boat at the bottom"); 3,000 / 200 / 200 images.
Written as

    data/silhouettes/images/00000.png ...
    data/silhouettes/dataset_silhouettes.json      Karpathy's format
    data/silhouettes/instances_silhouettes.json    COCO's instances format: each object's tight box, by category

and read as real data is, by `caption.data.sources.karpathy.KarpathySource` with that instances file, so attention
accuracy is scored on the six categories. Training and scoring: benchmarks/two_stage.py (`shapes_soft`, then
`shapes_hard` on the soft run's encoder; only the data, read at 64×64 as the other two datasets are (the shapes
encoder's 16×16 grid; objects of 13 to 17 pixels), and `model.decoding.max_caption_length` 24 swapped in). Writes
runs/silhouettes/silhouettes.json and prints a table.
"""

from two_stage import main

from caption.data.synthetic.silhouettes import CAPTION_LENGTH, NAME, READ_SIZE, generate

if __name__ == "__main__":
    main(name=NAME, description=__doc__, generate=generate, image_size=READ_SIZE, caption_length=CAPTION_LENGTH)
