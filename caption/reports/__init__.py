"""`caption compare`'s parts: the models (`runs`), the report table (`table`), the figures (`figures`), the training
logs (`logs`) and, for groups of seeds, their intervals and paired tests (`seeds`, `intervals`)."""

DATASETS = ("flickr30k", "flickr8k", "coco", "shapes")  # looked for in the data settings, in this order
