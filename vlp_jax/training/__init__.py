"""Training: `Experiment.from_config(config)` builds a run's parts (training/experiment.py); `loop.train_and_evaluate`
trains it."""
from vlp_jax.training.experiment import Experiment  # noqa: F401
