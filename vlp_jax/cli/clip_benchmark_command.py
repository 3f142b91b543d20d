"""LAION's CLIP_benchmark on a vlp_jax checkpoint, with no export step:

  python -m vlp_jax.clip_benchmark eval --pretrained=/tmp/run --dataset=wds/vtab/cifar10 --output=cifar10.json \\
      --dataset_root='https://huggingface.co/datasets/clip-benchmark/wds_{dataset_cleaned}/tree/main'

How it works. CLIP_benchmark loads a model through the function its `--model_type` names in the dict
`clip_benchmark.models.TYPE2FUNC`, and its CLI accepts the names in `clip_benchmark.models.MODEL_TYPES`. This command
adds `load_vlp_jax` to both under the name `vlp_jax` (`register`), then runs CLIP_benchmark's own CLI
(`clip_benchmark.cli.main`) on its arguments, with `--model_type=vlp_jax --model=vlp_jax
--output={dataset}_{model}_{language}_{task}.json` put before them (an argument you give wins). Datasets, tasks,
metrics and the JSON written are CLIP_benchmark's; `python -m vlp_jax.clip_benchmark eval --help` lists its flags.

- `--pretrained`: a vlp_jax checkpoint (a workdir, its latest step; a step directory; or an imported checkpoint),
  opened with `vlp_jax.load`. `--model` picks its weights: `vlp_jax` (the parameters) or `ema` (the EMA of
  config.ema.decay). One checkpoint per call: the output file's name does not carry it.
- The model (`TorchModel`) takes CLIP_benchmark's torch batches, embeds them with the JAX model (on jax's devices, in
  config.model.dtype; CLIP_benchmark's `--device` and autocast do not reach it) and returns float32 torch tensors,
  L2-normalised, on the batch's device.
- The transform (`Transform`) is the evaluation's preprocessing (`LoadedModel.preprocess`: bicubic resize of the
  shorter side, centre crop, OpenAI CLIP's mean and std), in PIL and numpy, as a [3, S, S] float32 tensor. The
  tokenizer (`Tokenizer`) is the model's own (`LoadedModel.tokenize`), as an int64 tensor.
- Tasks: zero-shot classification and retrieval, image-caption selection, and linear probes (CLIP_benchmark
  trains those with CUDA); not captioning (the towers generate no text).
- CLIP_benchmark's data loader forks `--num_workers` workers (default 4) from this process, which runs JAX: JAX warns
  that a fork may deadlock; the workers only decode and preprocess images (PIL, numpy). `--num_workers=0` loads in
  this process. A `wds/` set needs at least as many shards as workers.
- CLIP_benchmark 1.6's top-k accuracy (zero-shot classification, linear probes) raises a TypeError with NumPy >= 2.4
  (LAION-AI/CLIP_benchmark#147); where it does, the command puts the same computation in its place
  (`fix_accuracy`).

CLIP_benchmark itself (`pip install clip-benchmark`) imports torchvision. Exit codes: 2 for a missing checkpoint, an
unknown `--model` or CLIP_benchmark not installed (cli/common.py), CLIP_benchmark's own otherwise.
"""
from __future__ import annotations

import importlib
import os
import sys
from typing import Any, Sequence

import numpy as np
import torch

from vlp_jax import errors, inference
from vlp_jax.cli import common
from vlp_jax.data.image import image_ops

MODEL_TYPE = 'vlp_jax'
# CLIP_benchmark's --model (its `model_name`) -> whether to load the EMA of the weights.
MODEL_NAMES = {'vlp_jax': False, 'ema': True}
DEFAULT_ARGUMENTS = (f'--model_type={MODEL_TYPE}', '--model=vlp_jax',
                     '--output={dataset}_{model}_{language}_{task}.json')


class ClipBenchmarkError(errors.ConfigError):
  """A bad request: an unknown --model, or CLIP_benchmark not installed. Exit code 2."""


class Transform:
  """A PIL image (any mode) -> [3, S, S] float32 torch tensor: `inference.preprocess_image` (the evaluation's
  preprocessing, the model family's `preprocessing`) in CLIP_benchmark's channels-first layout. It holds only the
  size and that small spec: data loader workers get it cheaply."""

  def __init__(self, image_size: int,
               preprocessing: image_ops.ImagePreprocessing = image_ops.OPENAI_CLIP_PREPROCESSING):
    self.image_size = image_size
    self.preprocessing = preprocessing

  def __call__(self, image: Any) -> torch.Tensor:
    pixels = inference.preprocess_image(image, self.image_size, self.preprocessing)
    return torch.from_numpy(np.ascontiguousarray(pixels.transpose(2, 0, 1)))

  def __repr__(self) -> str:
    return f'vlp_jax.Transform(image_size={self.image_size})'


class Tokenizer:
  """Captions -> [N, context_length] int64 torch tokens, by the model's own tokenizer (`LoadedModel.tokenize`)."""

  def __init__(self, loaded: Any):
    self.loaded = loaded

  def __call__(self, texts: str | Sequence[str]) -> torch.Tensor:
    return torch.from_numpy(self.loaded.tokenize(texts).astype(np.int64))


class TorchModel(torch.nn.Module):
  """A `vlp_jax.load`ed checkpoint as CLIP_benchmark calls a model: `encode_image` on a [N, 3, H, W] float batch from
  `Transform`, `encode_text` on tokens from `Tokenizer`, each -> [N, d] float32 L2-normalised embeddings on the
  input's device. It has no torch parameters; `loaded` is the `inference.LoadedModel`."""

  def __init__(self, loaded: Any):
    super().__init__()
    self.loaded = loaded

  def encode_image(self, images: torch.Tensor) -> torch.Tensor:
    if images.ndim != 4 or images.shape[1] != 3:
      raise ValueError(f'encode_image takes a [N, 3, H, W] batch (what the transform gives), got {tuple(images.shape)}')
    pixels = images.detach().to('cpu', torch.float32).permute(0, 2, 3, 1).contiguous().numpy()
    return _to_torch(self.loaded.encode_image(pixels), images.device)

  def encode_text(self, tokens: torch.Tensor) -> torch.Tensor:
    return _to_torch(self.loaded.encode_tokens(tokens.detach().cpu().numpy()), tokens.device)

  def extra_repr(self) -> str:
    return repr(self.loaded)


def _to_torch(embeddings: np.ndarray, device: torch.device) -> torch.Tensor:
  return torch.from_numpy(np.array(embeddings, np.float32)).to(device)


def load_vlp_jax(model_name: str, pretrained: str, cache_dir: str | None = None, device: Any = 'cpu'
                 ) -> tuple[TorchModel, Transform, Tokenizer]:
  """CLIP_benchmark's loader contract (`clip_benchmark.models.TYPE2FUNC`): (model, transform, tokenizer) for the
  checkpoint `pretrained`. `model_name` picks the weights (MODEL_NAMES); `cache_dir` and `device` are unused (the JAX
  model runs on jax's devices)."""
  del cache_dir, device
  if model_name not in MODEL_NAMES:
    raise ClipBenchmarkError(f'--model={model_name!r}: with --model_type={MODEL_TYPE}, --model picks the weights of '
                             f'the checkpoint: one of {sorted(MODEL_NAMES)}')
  loaded = inference.load(pretrained, ema=MODEL_NAMES[model_name])  # what vlp_jax.load(pretrained, ema=...) gives
  return TorchModel(loaded), Transform(loaded.image_size, loaded.preprocessing), Tokenizer(loaded)


def _import(module: str) -> Any:
  """A module of CLIP_benchmark; ClipBenchmarkError when it or a dependency it imports is missing."""
  try:
    return importlib.import_module(module)
  except ModuleNotFoundError as error:
    raise ClipBenchmarkError(f'CLIP_benchmark cannot be imported ({error}): pip install clip-benchmark installs it '
                             'with its dependencies') from None


def register() -> None:
  """Adds `load_vlp_jax` to CLIP_benchmark's model types as `vlp_jax` (idempotent)."""
  models = _import('clip_benchmark.models')
  models.TYPE2FUNC[MODEL_TYPE] = load_vlp_jax
  if MODEL_TYPE not in models.MODEL_TYPES:
    models.MODEL_TYPES.append(MODEL_TYPE)  # the list object the CLI's --model_type choices and load_clip check


def topk_accuracy(logits: torch.Tensor, target: torch.Tensor, topk: Sequence[int] = (1,)) -> list[float]:
  """The fraction of rows whose target is among the k largest logits, for each k: what CLIP_benchmark's
  `zeroshot_classification.accuracy` computes, returning Python floats."""
  top = logits.topk(max(topk), dim=1).indices
  hits = top == target.view(-1, 1).to(top.dtype)
  return [hits[:, :k].any(dim=1).sum().item() / len(target) for k in topk]


def fix_accuracy() -> bool:
  """CLIP_benchmark 1.6's `accuracy` (zero-shot classification and linear probes) calls float() on a one-element
  array, which NumPy >= 2.4 rejects with a TypeError (LAION-AI/CLIP_benchmark#147); where it does, `topk_accuracy`
  takes its place. True when replaced."""
  zeroshot_classification = _import('clip_benchmark.metrics.zeroshot_classification')
  linear_probe = _import('clip_benchmark.metrics.linear_probe')
  try:
    zeroshot_classification.accuracy(torch.zeros(1, 1), torch.zeros(1, dtype=torch.long))
    return False
  except TypeError:
    zeroshot_classification.accuracy = linear_probe.accuracy = topk_accuracy
    return True


def with_defaults(args: Sequence[str]) -> list[str]:
  """CLIP_benchmark's arguments with this command's defaults (DEFAULT_ARGUMENTS) right after `eval`, so that the
  same flag given later wins (argparse keeps the last)."""
  args = list(args)
  return [args[0], *DEFAULT_ARGUMENTS, *args[1:]] if args[:1] == ['eval'] else args


def main(args: Sequence[str]) -> int:
  """Registers the vlp_jax model type and runs CLIP_benchmark's CLI on `args` (without the program name)."""
  register()
  fix_accuracy()
  cli = _import('clip_benchmark.cli')
  saved = sys.argv
  sys.argv = ['python -m vlp_jax.clip_benchmark', *with_defaults(args)]
  try:
    cli.main()
  finally:
    sys.argv = saved
  return 0


def run_command() -> None:
  """`python -m vlp_jax.clip_benchmark ARGS`: this module's docstring for no arguments or --help, else `main`."""
  args = sys.argv[1:]
  if not args or args[0] in ('-h', '--help'):
    print(__doc__)
    return
  # torch (CLIP_benchmark's side) may share the GPU: let jax take memory as it needs it rather than most of it upfront.
  os.environ.setdefault('XLA_PYTHON_CLIENT_PREALLOCATE', 'false')
  sys.exit(common.exit_on_user_error(main, args))
