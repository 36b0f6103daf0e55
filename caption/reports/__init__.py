"""`caption compare`'s parts: the models (`models`), the report table (`table`) and the figures (`figures`)."""

DATASETS = ("flickr30k", "flickr8k", "coco", "shapes")  # looked for in the data settings, in this order
