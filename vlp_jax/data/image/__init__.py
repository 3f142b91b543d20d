"""Images as the towers take them and as the views augment them: a model family's preprocessing (image_ops.py),
host-side augmentations (transforms.py, autoaugment.py), multi-crop views rendered in the train step
(device_augment.py), NaFlex patches and the NaFlex stage's batches (naflex_patches.py, naflex_stage.py), and staged
resolutions (resolution_stages.py)."""
