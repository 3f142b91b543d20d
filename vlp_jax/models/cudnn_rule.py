"""Whether the installed jax lets cuDNN's fused attention train on an odd number of rows (ViT-B/16's 197).

jax's training rule for cuDNN attention (`jax._src.cudnn.fused_attention_stablehlo`, `_dot_product_attention_fwd_rule`)
asks its shape check whether a bias is present with `bias is not None`, after the public function has replaced a
missing bias by a zero-size placeholder: the check always sees a bias and refuses odd lengths when training
("Unsupported sequence length Q 197, KV 197"), although cuDNN itself takes them (the refusal is meant for a bias's
gradient). docs/scaling.md has a minimal reproduction and the one-line fix. Until a jax with the fix is installed the
'cudnn' route pads the rows to an even count (198 for 197), which the rule accepts.

The probe needs no GPU. The public `jax.nn.dot_product_attention(implementation='cudnn')` cannot be traced on a
machine without cuDNN (it asks for cuDNN's version first: "RuntimeError: cuDNN is not detected", also when lowering
for the 'cuda' platform from a CPU host), so the probe traces the training rule itself, abstractly
(`jax.eval_shape`, nothing compiled or run), with the arguments the public function gives it for q, k, v and no
bias or mask, at an odd length. The rule's shape check runs at trace time and needs only the shapes.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

try:  # a private module: where a jax release moves it, the probe answers 'no' (even padding, always safe)
  from jax._src.cudnn import fused_attention_stablehlo as _fused
except ImportError:
  _fused = None

_ODD_LENGTH = 3
_CUDNN_VERSION = 90000  # the rule reads the version only for cases not probed here (MLA, compute capability 10.3)


def _trace_training_rule(length: int) -> None:
  """Trace (never run) the forward and backward of cuDNN attention over `length` rows, bf16, one example and one
  head of 8 channels, no bias, no mask, no sequence lengths; raises what the rule raises."""
  rows = jax.ShapeDtypeStruct((1, length, 1, 8), jnp.bfloat16)

  def forward_and_backward(q, k, v):
    unused = jnp.zeros(0, q.dtype)  # what the public function passes for every absent operand
    attend = functools.partial(
        _fused._dot_product_attention, bias=unused, q_seqlen=unused, kv_seqlen=unused, q_offsets=unused,
        kv_offsets=unused, page_table_k=unused, page_table_v=unused, scale=8**-0.5, seed=0, dropout_rate=0.0,
        variadic_args=(False, False), mask_type=_fused.MaskType.NO_MASK, layout=_fused.AttentionLayout.BTNH.value,
        sliding_window_length=None, cudnn_version=_CUDNN_VERSION, return_residual=False)
    out, vjp = jax.vjp(lambda q, k, v: attend(q, k, v), q, k, v)
    return vjp(out)

  jax.eval_shape(forward_and_backward, rows, rows, rows)


@functools.lru_cache(maxsize=None)
def cudnn_trains_odd_lengths() -> bool:
  """True when the installed jax's cuDNN attention rule accepts an odd row count in training (the bug above fixed);
  False when it refuses it, or when the rule cannot be traced as this probe expects (a release that reshaped it)."""
  if _fused is None:
    return False
  try:
    _trace_training_rule(_ODD_LENGTH)
  except Exception:  # noqa: BLE001 -- NotImplementedError is the bug; anything else: a rule the probe cannot read
    return False
  return True


def cudnn_pad_multiple() -> int:
  """The row multiple the 'cudnn' route needs: 1 (no padding) where the installed jax trains on odd lengths, else 2."""
  return 1 if cudnn_trains_odd_lengths() else 2
