"""What the tests share: the micro config (also a config file: `--config=tests/support.py`, with $VLP_JAX_CACHE as
the data cache), paths, numpy references (unit vectors, central differences), a few train steps on random batches,
and open_clip's reference modules without torchvision.

It is a module of its own, not conftest, so that a subprocess can load it as a config file without the 8 host
devices conftest forces.
"""
from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import types

import numpy as np
import pytest

TESTS = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(TESTS)  # the repository
MICRO_CONFIG = os.path.join(TESTS, 'support.py')  # this file, as a config file
TEST_DATA = os.path.join(TESTS, 'data')
# XLA options for a faster CPU compile, the same values (every equality and parity test passes either way): LLVM at
# optimisation level 1, and XLA's classic elemental emitters for fusions instead of the newer fusion emitters,
# which halved the compile time of a micro train step (5.8 -> 2.7-3.4 CPU s) and cut a third of the CPU time of
# the unit tests of training and objectives (983 -> 691 s). Tests that start a command as a user runs it (one CPU
# device) set XLA_FLAGS to these alone.
FAST_COMPILE_XLA_FLAGS = '--xla_backend_optimization_level=1 --xla_cpu_use_fusion_emitters=false'


def micro_config(cache_dir: str):
  """A model and dataset small enough that a few steps compile and run in seconds."""
  from vlp_jax.config import base_config
  config = base_config()
  config.total_steps = 6
  config.batch_size = 16
  config.model.embed_dim = 32
  config.model.vision.update(image_size=16, patch_size=4, width=32, layers=1, heads=2)
  config.model.text.update(context_length=16, width=32, layers=1, heads=2)
  config.data.cache_dir = cache_dir
  config.data.synthetic.update(resolution=16, num_train=64, num_val=16, num_test=32, shards=2)
  config.optim.warmup_steps = 2
  config.log_every_steps = 2
  config.eval.every_steps = 3
  config.eval.batch_size = 32
  # The evaluators the training tests check; segmentation, compositionality and the linear probe have their own tests
  # (each extra task compiles its own encode function in every run).
  config.eval.tasks = ('zeroshot', 'retrieval', 'affinity')
  config.checkpoint.every_steps = 3
  return config


def get_config():
  """As a config file: `--config=tests/support.py`, with $VLP_JAX_CACHE as the data cache."""
  return micro_config(os.environ.get('VLP_JAX_CACHE', ''))


def set_unoptimised_compiles(unoptimised: bool) -> None:
  """Compile without XLA's optimisations (jax_disable_most_optimizations) or with them, from now on in this process.
  On a change it drops jax's in-memory executables: the setting is not part of their cache keys, so an op run eagerly
  (an initialiser's erf_inv, say) would otherwise reuse code compiled under the other setting, which rounds
  differently, and a test's result would depend on which tests its worker ran before. The persistent cache keys
  on the setting, so a switch back loads programs instead of compiling them."""
  import jax
  if jax.config.read('jax_disable_most_optimizations') != unoptimised:
    jax.clear_caches()
    jax.config.update('jax_disable_most_optimizations', unoptimised)


@contextlib.contextmanager
def optimised_compiles():
  """XLA's optimisations on inside the block, whatever the test's folder compiles with (conftest.UNOPTIMISED_FOLDERS):
  for programs whose bits a test compares with another program's."""
  import jax
  previous = jax.config.read('jax_disable_most_optimizations')
  set_unoptimised_compiles(False)
  try:
    yield
  finally:
    set_unoptimised_compiles(previous)


# ------------------------------------------------------------------------------------------ numpy references


def unit_vectors(rng: np.random.Generator, shape) -> np.ndarray:
  """Random rows of unit L2 norm: [..., d]."""
  x = rng.normal(size=shape)
  return x / np.linalg.norm(x, axis=-1, keepdims=True)


def numeric_grad(fn, args, index, eps=1e-6):
  """Central differences of a numpy function with respect to args[index], in float64."""
  args = [np.array(a, np.float64) for a in args]
  grad = np.zeros_like(args[index])
  for idx in np.ndindex(grad.shape):
    plus = [a.copy() for a in args]
    minus = [a.copy() for a in args]
    plus[index][idx] += eps
    minus[index][idx] -= eps
    grad[idx] = (fn(*plus) - fn(*minus)) / (2 * eps)
  return grad


# ------------------------------------------------------------------------- train steps on random batches


def experiment(config, mesh=None):
  """The run of a config (training/experiment.py) on `mesh` (default: one device; the model, objective, optimizer and
  state initialiser do not depend on it), the config taken as it is: tests build the parts of configs made for one
  check, which a run might refuse."""
  import jax
  from vlp_jax import parallel
  from vlp_jax.training import Experiment
  return Experiment.from_config(config, parallel.make_mesh(1, jax.devices()[:1]) if mesh is None else mesh,
                                validate=False)


def build_objective(config):
  """(objective, optimizer) of a config."""
  run = experiment(config)
  return run.objective, run.tx


def jit_init(fn):
  """`jax.jit(fn)` for an initialiser, with LLVM at optimisation level 1: XLA's CPU default spends about a second on
  each threefry draw, one per parameter (most of a ResNet init's 10 s compile); level 1 compiles in a third of the
  time, to the same bits (checked on the micro ViT, ResNet, SLIP, COSMOS, scanned and locked states; level 0 rounds
  erfinv differently)."""
  import jax
  return jax.jit(fn, compiler_options={'xla_backend_optimization_level': 1})


def initial_state(config):
  """The initial train state on the host (jit: an eager init compiles op by op, slowly for convolutions), with the
  EMA of the weights when config.ema.decay > 0."""
  import jax
  return jax.device_get(jit_init(experiment(config).create_state)(jax.random.key(0)))


def compiled_step(config, mesh, state=None):
  """(the compiled train step, the state placed on `mesh`); the step accumulates gradients and keeps the EMA of the
  weights as the config says (config.accumulation, config.ema)."""
  import jax
  run = experiment(config, mesh)
  state = initial_state(config) if state is None else state
  return run.compiled_step(), jax.device_put(state, run.state_shardings)


def random_batches(config, n):
  """n random batches of the config's shapes (float images, tokens with SOT and EOT)."""
  rng = np.random.default_rng(0)
  size, length = config.model.vision.image_size, config.model.text.context_length
  out = []
  for _ in range(n):
    text = rng.integers(1, 49000, (config.batch_size, length)).astype(np.int32)
    text[:, 0], text[:, 5] = 49406, 49407
    out.append({'image': rng.normal(size=(config.batch_size, size, size, 3)).astype(np.float32), 'text': text,
                'label': np.zeros(config.batch_size, np.int32)})
  return out


@functools.lru_cache(maxsize=4)
def _jitted_loss_and_grads(objective, mode, num_micro):
  """One jitted function per (objective, mode, num_micro): a test that calls it again (another rng, another batch of
  the same shapes) runs the program it compiled."""
  import jax
  import jax.numpy as jnp
  from vlp_jax import accumulation
  fn = accumulation.loss_and_grad_fn(mode, num_micro)
  return jax.jit(lambda p, s, b, r: fn(objective, p, s, b, r, jnp.int32(4)))


def accumulated_loss_and_grads(objective, params, state, batch, rng, mode, num_micro, mesh):
  """(loss, metrics, model_state, grads) on the host of one step's gradient computed whole or in `num_micro`
  micro-batches (`mode`, vlp_jax/accumulation.py), jitted on `mesh` at step 4."""
  import jax
  from vlp_jax import parallel
  with jax.set_mesh(mesh):
    out = _jitted_loss_and_grads(objective, mode, num_micro)(params, state, parallel.global_batch(batch, mesh), rng)
  return parallel.to_host(out)


def randomize_torch_weights(torch: types.ModuleType, model, seed: int = 0, raw: tuple[str, ...] = ()):
  """A PyTorch reference `model` in eval mode with non-trivial random weights, drawn in parameter order from `seed`:
  norm gains (names holding 'norm' or 'ln', ending in 'weight') 1 + 0.1 N(0, 1), the parameters named in `raw` (a
  logit scale and bias) N(0, 1), every other 0.05 N(0, 1). `torch` is passed in: the suite runs without it."""
  generator = torch.Generator().manual_seed(seed)
  with torch.no_grad():
    for name, p in model.named_parameters():
      noise = torch.randn(p.shape, generator=generator)
      if ('norm' in name or 'ln' in name) and name.endswith('weight'):
        p.copy_(1 + 0.1 * noise)
      else:
        p.copy_(noise if name in raw else 0.05 * noise)
  return model.eval()


def assert_close_at_scale(got, want, rtol=1e-5):
  """rtol of each leaf's largest entry: matmuls of other shapes round differently, so entries near 0 differ by more
  than rtol of themselves. Leaves that are mathematically zero hold only rounding noise, so no leaf's scale is taken
  below 1e-3 of the largest."""
  import jax
  largest = max((float(np.abs(w).max()) for w in jax.tree.leaves(want)), default=0.0)

  def check(path, g, w):
    scale = max(float(np.abs(w).max()), 1e-3 * largest, 1e-30)
    np.testing.assert_allclose(g, w, rtol=rtol, atol=rtol * scale, err_msg=jax.tree_util.keystr(path))
  jax.tree_util.tree_map_with_path(check, got, want)


_PACKED_ATTENTION_BIAS = "['in_proj']['bias']"  # [..., 3w]: query, key, value biases (scanned layers lead with L)


def key_biases(params) -> list[tuple[str, np.ndarray]]:
  """[(path, the key part [..., w:2w] of the packed in_proj bias)] of every attention in `params`."""
  import jax
  flat = jax.tree_util.tree_flatten_with_path(params)[0]
  return [(jax.tree_util.keystr(path), np.asarray(leaf)[..., leaf.shape[-1] // 3:2 * leaf.shape[-1] // 3])
          for path, leaf in flat if jax.tree_util.keystr(path).endswith(_PACKED_ATTENTION_BIAS)]


def _without_key_biases(params):
  """`params` on the host with the key part of every packed attention bias zeroed."""
  import jax

  def zero_keys(path, leaf):
    leaf = np.array(leaf)
    if jax.tree_util.keystr(path).endswith(_PACKED_ATTENTION_BIAS):
      width = leaf.shape[-1] // 3
      leaf[..., width:2 * width] = 0
    return leaf
  return jax.tree_util.tree_map_with_path(zero_keys, params)


def assert_trained_params_close(got, want, rtol=1e-4, atol=2e-5):
  """Parameters after Adam steps of two programs of the same step (sharded and not, accumulated and whole) agree to
  rounding, except the attention key biases, which are left out: softmax ignores a shift shared by a query's logits,
  so their gradient is exactly zero and only rounding noise, which differs between the programs and which Adam's
  normalisation turns into steps of up to lr either way (a key bias entry 2.3e-5 apart after 3 steps, ResNet run,
  AMD EPYC, jax 0.10.2). atol: Adam also moves other near-zero-gradient entries by a share of lr; 2e-5 is still far
  below what one wrong step (~lr = 5e-4 per entry) changes."""
  import chex
  chex.assert_trees_all_close(_without_key_biases(got), _without_key_biases(want), rtol=rtol, atol=atol)


def random_tokens(rng: np.random.Generator, size: tuple[int, ...], length: int, eot: int) -> np.ndarray:
  """[*size, length] int32 token rows: SOT, random ids, EOT at `eot`, then padding."""
  text = rng.integers(1, 49000, (*size, length)).astype(np.int32)
  text[..., 0], text[..., eot] = 49406, 49407
  text[..., eot + 1:] = 0
  return text


def objective_batch(config, size: int, seed: int = 0) -> dict[str, np.ndarray]:
  """Every input any objective reads, random but well formed: [size, ...] rows of the config's shapes (CLIP's image
  and text, SLIP's views, the SaCo teacher, COSMOS's crops and text crops, SigLIP 2's views)."""
  rng = np.random.default_rng(seed)
  s, length = config.model.vision.image_size, config.model.text.context_length
  image = lambda *lead, side=s: rng.normal(size=(*lead, side, side, 3)).astype(np.float32)  # noqa: E731
  return {'image': image(size), 'ssl_a': image(size), 'ssl_b': image(size),
          'text': random_tokens(rng, (size,), length, 7),
          'teacher': rng.normal(size=(size, 12)).astype(np.float32),
          'global_images': image(size, 2), 'local_images': image(size, 2, side=s // 2),
          'texts': random_tokens(rng, (size, 2), length, 9), 'local_texts': random_tokens(rng, (size, 2), 8, 5),
          'global_view': image(size), 'local_views': image(size, 2, side=s // 2)}


def run_steps(config, mesh, steps=3, state=None):
  """(host params, the losses, the state) after `steps` train steps on random batches."""
  import jax
  from vlp_jax import parallel
  step_fn, state = compiled_step(config, mesh, state)
  losses = []
  for batch in random_batches(config, steps):
    state, metrics = step_fn(state, parallel.global_batch(batch, mesh), jax.random.key(1))
    losses.append(float(metrics['loss']))
  return parallel.to_host(state.params), losses, state


# ------------------------------------------------------------------- open_clip's modules, without torchvision
# Reference PyTorch modules from open_clip for parity tests, importable without torchvision.
#
# `import open_clip` runs the package `__init__`, which imports every submodule, and `open_clip.utils` (imported by
# nearly all of them) does `from torchvision.ops.misc import FrozenBatchNorm2d` at the top, only for
# `freeze_batch_norm_2d`. When torchvision is missing, `import_open_clip_module` therefore:
#   1. registers a bare `open_clip` package (its spec, with its search path, but `__init__` not executed), so that
#      submodules import one by one with their relative imports intact;
#   2. imports `open_clip.utils` alone while a placeholder `torchvision.ops.misc` (whose `FrozenBatchNorm2d` raises
#      when used) sits in `sys.modules`, then removes the placeholder, so nothing else sees a fake torchvision;
#   3. imports the requested submodule, which finds `open_clip.utils` already loaded.
# With torchvision installed the real package is imported unchanged.

_TORCHVISION_STUBS = ('torchvision', 'torchvision.ops', 'torchvision.ops.misc')


class _FrozenBatchNorm2dUnavailable:

  def __init__(self, *args, **kwargs):
    raise NotImplementedError('torchvision is not installed; open_clip.utils.freeze_batch_norm_2d is unavailable')


@contextlib.contextmanager
def _placeholder_torchvision():
  """Temporarily provides `torchvision.ops.misc.FrozenBatchNorm2d` (a placeholder) if torchvision is missing."""
  if 'torchvision' in sys.modules or importlib.util.find_spec('torchvision') is not None:
    yield
    return
  stubs = {name: types.ModuleType(name) for name in _TORCHVISION_STUBS}
  stubs['torchvision'].ops = stubs['torchvision.ops']
  stubs['torchvision.ops'].misc = stubs['torchvision.ops.misc']
  stubs['torchvision.ops.misc'].FrozenBatchNorm2d = _FrozenBatchNorm2dUnavailable
  sys.modules.update(stubs)
  try:
    yield
  finally:
    for name in _TORCHVISION_STUBS:
      sys.modules.pop(name, None)


class _AnyAttribute:
  """Stands for any torchvision object while timm imports (only its data transforms name torchvision)."""

  def __init__(self, *args, **kwargs):
    pass

  def __call__(self, *args, **kwargs):
    return _AnyAttribute()

  def __getattr__(self, name):
    return _AnyAttribute()

  def __mro_entries__(self, bases):  # timm subclasses torchvision transforms
    return (object,)


class _PlaceholderModule(types.ModuleType):

  def __getattr__(self, name):
    if name.startswith('__'):
      raise AttributeError(name)
    return _AnyAttribute()


class _PlaceholderTorchvision(importlib.abc.MetaPathFinder, importlib.abc.Loader):
  """Finds every `torchvision.*` module as a placeholder whose attributes are `_AnyAttribute`s."""

  def find_spec(self, name, path, target=None):
    if name == 'torchvision' or name.startswith('torchvision.'):
      return importlib.machinery.ModuleSpec(name, self, is_package=True)
    return None

  def create_module(self, spec):
    return _PlaceholderModule(spec.name)

  def exec_module(self, module):
    module.__path__ = []


def _import_timm() -> types.ModuleType | None:
  """timm (open_clip's image trunk for its SigLIP models), or None when it is not installed. Without torchvision,
  timm is imported while a placeholder torchvision answers its data modules' imports (the models never call them);
  the placeholder is gone afterwards, so nothing else sees a fake torchvision."""
  if 'timm' in sys.modules:
    return sys.modules['timm']
  if importlib.util.find_spec('timm') is None:
    return None
  if importlib.util.find_spec('torchvision') is not None:
    return importlib.import_module('timm')
  finder = _PlaceholderTorchvision()
  sys.meta_path.insert(0, finder)
  try:
    return importlib.import_module('timm')
  finally:
    sys.meta_path.remove(finder)
    for module in [m for m in sys.modules if m == 'torchvision' or m.startswith('torchvision.')]:
      sys.modules.pop(module)


def use_placeholder_torchvision() -> None:
  """For a subprocess only, never the pytest process (other tests probe for torchvision): when torchvision is not
  installed, every `torchvision.*` module imports from here on as a placeholder, so that a library that names it only
  in imports it never calls on the tested path (CLIP_benchmark's CLI, for a webdataset set) imports."""
  if importlib.util.find_spec('torchvision') is None:
    sys.meta_path.insert(0, _PlaceholderTorchvision())


def import_open_clip_module(name: str) -> types.ModuleType:
  """`open_clip.<name>` (e.g. 'modified_resnet', 'transformer'); skips the calling test if torch or open_clip is
  not installed, or if the module needs another missing dependency (e.g. 'transform' needs torchvision proper)."""
  pytest.importorskip('torch', reason='torch is needed for the open_clip parity tests')
  full_name = f'open_clip.{name}'
  if full_name in sys.modules:
    return sys.modules[full_name]
  spec = importlib.util.find_spec('open_clip')
  if spec is None:
    pytest.skip('open_clip_torch is not installed; needed for the open_clip parity tests')
  _import_timm()  # first, so that open_clip.timm_model finds it
  if 'open_clip' not in sys.modules and importlib.util.find_spec('torchvision') is None:
    # Bare package: submodules resolve from spec.submodule_search_locations; __init__ is never run.
    sys.modules['open_clip'] = importlib.util.module_from_spec(spec)
  try:
    # The placeholder is present only while open_clip.utils (which imports nothing else) loads, so that other
    # libraries' torchvision probes (e.g. transformers', via open_clip.hf_model) never see it.
    with _placeholder_torchvision():
      importlib.import_module('open_clip.utils')
    return importlib.import_module(full_name)
  except ModuleNotFoundError as e:
    pytest.skip(f'{full_name} needs a missing dependency: {e}')


# ------------------------------------------------------------------------------------------ webdataset shards


def write_webdataset(root: str, sources: dict[str, int], samples_per_shard: int = 12, side: int = 16, seed: int = 0,
                     broken: bool = True) -> dict[str, list[str]]:
  """img2dataset-style tar shards under root/<source>/<shard>.tar: per sample KEY.png (a random [side, side] image),
  KEY.txt and KEY.json ({"caption": ...}); sources: {name: number of shards}. With `broken`, the first shard of
  each source also holds a sample without an image, one without a caption, and one whose image is not an image.
  Returns {source: [tar paths]}; deterministic in `seed`."""
  import io
  import tarfile
  from PIL import Image

  rng = np.random.default_rng(seed)

  def add(tar, name, data):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))

  out = {}
  for source, shards in sources.items():
    os.makedirs(os.path.join(root, source), exist_ok=True)
    out[source] = []
    for shard in range(shards):
      path = os.path.join(root, source, f'{shard:05d}.tar')
      with tarfile.open(path, 'w') as tar:
        for i in range(samples_per_shard):
          key = f'{source}{shard:02d}{i:04d}'
          caption = f'{source} sample {i} of shard {shard}'
          if broken and shard == 0 and i == 1:
            add(tar, f'{key}.txt', caption.encode())  # no image member
            continue
          image = io.BytesIO()
          Image.fromarray(rng.integers(0, 256, (side, side, 3), dtype=np.uint8)).save(image, 'PNG')
          add(tar, f'{key}.png', b'not an image' if broken and shard == 0 and i == 3 else image.getvalue())
          if broken and shard == 0 and i == 2:
            continue  # no caption member
          add(tar, f'{key}.txt', caption.encode())
          add(tar, f'{key}.json', ('{"caption": "%s (json)"}' % caption).encode())
      out[source].append(path)
  return out


# ------------------------------------------------------------------------------------------ runs in subprocesses


def wait_for_step(process, workdir: str, step: int, timeout: float = 240) -> int:
  """Block until the run's metrics.jsonl shows a train step >= `step` (failing if `process` exits first); returns
  the newest step logged."""
  import json
  import time
  path, began = os.path.join(workdir, 'metrics.jsonl'), time.time()
  while time.time() - began < timeout:
    assert process.poll() is None, process.communicate()
    if os.path.exists(path):
      steps = [json.loads(line)['step'] for line in open(path) if line.strip().endswith('}')]
      if steps and max(steps) >= step:
        return max(steps)
    time.sleep(0.02)
  raise TimeoutError(f'no step {step} within {timeout}s')


def tensorboard_events(workdir: str):
  """Every event in the workdir's TensorBoard files (in file-name order), read with the TFRecord framing and
  tensorboardX's Event proto; each record's masked CRC-32Cs checked with tensorboardX's own CRC code, as
  TensorBoard's reader checks them."""
  import struct
  from tensorboardX.crc32c import crc32c
  from tensorboardX.proto import event_pb2

  def masked(data):
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF

  for name in sorted(os.listdir(workdir)):
    if not name.startswith('events.out.tfevents'):
      continue
    with open(os.path.join(workdir, name), 'rb') as f:
      data = f.read()
    offset = 0
    while offset < len(data):
      header = data[offset:offset + 8]
      (length,) = struct.unpack('<Q', header)
      record = data[offset + 12:offset + 12 + length]
      assert struct.unpack('<I', data[offset + 8:offset + 12])[0] == masked(header), (name, offset)
      assert struct.unpack('<I', data[offset + 12 + length:offset + 16 + length])[0] == masked(record), (name, offset)
      yield event_pb2.Event.FromString(record)
      offset += 12 + length + 4
