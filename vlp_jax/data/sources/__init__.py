"""Where examples come from besides our own ArrayRecord shards: webdataset tars read where they are
(webdataset_tars.py), prepared tensorflow-datasets splits (tfds_splits.py, with the readable class names of their
datasets in class_names.py), and the embedded dataset of rendered shape scenes (synthetic_shapes.py)."""
