"""The architecture's FLOPs that perf/mfu counts (training/flops.py `architecture_config`, PaLM's model FLOPs):
a tower with every row through every block counts what a hand count in PaLM's form gives (6 x matmul parameters per
token + 12 x layers x width x rows, here its forward third) and about what XLA's cost analysis of that forward
counts; the pooled last block computes the same values and saves exactly its other rows' work; a train step's
architecture count is its executed count plus three times (forward and backward) those saved rows, whatever remat
recomputes."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from support import build_objective, jit_init, micro_config, objective_batch
from vlp_jax import parallel
from vlp_jax.models.transformer import BlockStack
from vlp_jax.models.vit import VisionTransformer
from vlp_jax.training.flops import architecture_config, function_flops, program_cost
from vlp_jax.training.experiment import architecture_flops_of
from vlp_jax.training.step import UnrolledFlops

BATCH, WIDTH, LAYERS, HEADS, EMBED, IMAGE, PATCH = 2, 128, 2, 2, 64, 32, 8
ROWS = (IMAGE // PATCH) ** 2 + 1  # 16 patches and the class token


def hand_count_forward(rows: int, width: int, layers: int, hidden: int, patch_pixels: int, embed: int) -> int:
  """One image's forward matmul FLOPs in PaLM's form: 2 per multiply-add of every matmul parameter per token it
  touches (the patches' embedding, each block's qkv, output and MLP weights for every row, the projection for the
  pooled row) plus attention's 2 x 2 x rows x width per row and layer (scores and the weighted sum)."""
  block_params = 3 * width * width + width * width + 2 * width * hidden
  return (2 * (rows - 1) * patch_pixels * width + 2 * rows * layers * block_params + 2 * 2 * layers * rows * rows * width
          + 2 * width * embed)


def saved_rows_forward(rows: int, width: int, hidden: int) -> int:
  """What a pooled last block does not compute, per example: every other row's attention query (against all rows),
  output projection and MLP (the qkv projection still runs on every row: the keys and values need it)."""
  return (rows - 1) * (2 * 2 * rows * width + 2 * width * width + 2 * 2 * width * hidden)


def _tower(pool_last_block: bool) -> VisionTransformer:
  return VisionTransformer(IMAGE, PATCH, WIDTH, LAYERS, HEADS, EMBED, 'gelu',
                           stack=BlockStack(pool_last_block=pool_last_block))


@pytest.fixture(scope='module')
def tower_forwards():
  """(images, variables, {pool_last_block: forward of the images to the embedding})."""
  images = jnp.asarray(np.random.default_rng(0).normal(size=(BATCH, IMAGE, IMAGE, 3)), jnp.float32)
  variables = jit_init(lambda rng: _tower(True).init(rng, images, with_tokens=False))(jax.random.key(0))
  forwards = {pooled: (lambda v, x, t=_tower(pooled): t.apply(v, x, with_tokens=False)['embed'])
              for pooled in (True, False)}
  return images, variables, forwards


def test_the_unpooled_tower_counts_a_hand_count_and_about_xlas(tower_forwards):
  images, variables, forwards = tower_forwards
  want = BATCH * hand_count_forward(ROWS, WIDTH, LAYERS, 4 * WIDTH, PATCH * PATCH * 3, EMBED)
  assert function_flops(forwards[False], variables, images) == want
  # XLA also counts the elementwise work (LayerNorm, GELU, softmax, the positional embeddings): 1.8% more here
  xla = program_cost(jax.jit(forwards[False]).lower(variables, images).compile())['flops']
  assert want < xla < 1.05 * want


def test_the_pooled_last_block_saves_exactly_its_other_rows(tower_forwards):
  images, variables, forwards = tower_forwards
  saved = function_flops(forwards[False], variables, images) - function_flops(forwards[True], variables, images)
  assert saved == BATCH * saved_rows_forward(ROWS, WIDTH, 4 * WIDTH)
  np.testing.assert_allclose(jax.jit(forwards[True])(variables, images), jax.jit(forwards[False])(variables, images),
                             rtol=1e-5, atol=1e-6)


def test_a_steps_architecture_count_adds_the_saved_rows_forward_and_backward():
  """The micro CLIP (one block per tower: 17 image rows, 16 causal text rows, width 32) at batch 4, with remat on,
  which the executed count recomputes and the architecture's leaves out."""
  config = micro_config('')
  config.model.update(remat=True, attention='xla')
  batch_size = 4
  batch = {k: v for k, v in objective_batch(config, batch_size).items() if k in ('image', 'text')}
  mesh = parallel.make_mesh(1, jax.devices()[:1])
  rng = jax.random.key(1)
  _, tx = build_objective(config)
  counter = lambda c: UnrolledFlops(build_objective(c)[0], tx, mesh, 0)  # noqa: E731
  remat_off = architecture_config(config)
  remat_off.model.pool_last_block = True  # the executed step without recomputation
  executed = counter(remat_off).traced_flops(batch, rng)
  architecture = architecture_flops_of(config, tx, mesh).traced_flops(batch, rng)
  vision, text = config.model.vision, config.model.text
  saved = (saved_rows_forward((vision.image_size // vision.patch_size) ** 2 + 1, vision.width, 4 * vision.width)
           + saved_rows_forward(text.context_length, text.width, 4 * text.width))
  assert architecture - executed == 3 * batch_size * saved
  assert counter(config).traced_flops(batch, rng) > executed  # remat's recomputation: executed, not architecture
