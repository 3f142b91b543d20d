"""OpenAI CLIP's ModifiedResNet image tower (RN50 and kin), with modules named as in OpenAI checkpoints.

Differences from a torchvision ResNet: a three-conv stem ending in an average pool, anti-aliased striding (an
average pool before the stride-1 conv3 and before the downsample conv instead of strided convs), and an
attention pool whose only query is the mean token.

Parameter tree (OpenAI name with '.{i}' -> '_{i}'; BatchNorm running statistics live in `batch_stats`):
  conv1, bn1, conv2, bn2, conv3, bn3 (stem)
  layer{1..4}_{j}/{conv1, bn1, conv2, bn2, conv3, bn3, downsample_0 (conv), downsample_1 (BatchNorm)}
  attnpool/{positional_embedding, q_proj, k_proj, v_proj, c_proj}
"""
from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections

from vlp_jax.models.positional import resize_positional_embedding
from vlp_jax.models.towers import VISION_TOWERS, VisionTower
from vlp_jax.models.transformer import BlockStack

EXPANSION = 4  # bottleneck output channels = planes * EXPANSION
BN_EPS = 1e-5
BN_MOMENTUM = 0.9  # Flax convention: running = 0.9 * running + 0.1 * batch (torch momentum 0.1)
# torch's default conv init (kaiming_uniform with a=sqrt(5)), which OpenAI keeps for the convs.
CONV_INIT = nn.initializers.variance_scaling(1 / 3, 'fan_in', 'uniform')


def conv(features: int, kernel: int, name: str, dtype: Any, strides: int = 1) -> nn.Conv:
  """Bias-free conv with torch-style symmetric padding kernel // 2 (Flax 'SAME' pads stride-2 convs unevenly)."""
  pad = kernel // 2
  return nn.Conv(features, (kernel, kernel), strides=(strides, strides), padding=((pad, pad), (pad, pad)),
                 use_bias=False, kernel_init=CONV_INIT, dtype=dtype, name=name)


def batch_norm(name: str, train: bool, dtype: Any, zero_scale: bool = False) -> nn.BatchNorm:
  """BatchNorm over [B, H, W, C]; batch statistics when training, running averages otherwise."""
  scale_init = nn.initializers.zeros if zero_scale else nn.initializers.ones
  return nn.BatchNorm(use_running_average=not train, momentum=BN_MOMENTUM, epsilon=BN_EPS, scale_init=scale_init,
                      dtype=dtype, name=name)


def avg_pool(x: jax.Array, size: int) -> jax.Array:
  """[B, H, W, C] -> [B, H // size, W // size, C], as torch's AvgPool2d(size) (stride = size, floor)."""
  if size == 1:
    return x
  return nn.avg_pool(x, (size, size), strides=(size, size), padding='VALID')


class Bottleneck(nn.Module):
  """1x1 -> 3x3 -> [avgpool] -> 1x1 (x4 channels) with a residual; stride is applied by average pooling."""
  planes: int
  stride: int = 1
  dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, x: jax.Array, train: bool) -> jax.Array:
    """x: [B, H, W, C_in] -> [B, H // stride, W // stride, planes * 4]."""
    out_features = self.planes * EXPANSION
    out = nn.relu(batch_norm('bn1', train, self.dtype)(conv(self.planes, 1, 'conv1', self.dtype)(x)))
    out = nn.relu(batch_norm('bn2', train, self.dtype)(conv(self.planes, 3, 'conv2', self.dtype)(out)))
    out = avg_pool(out, self.stride)
    # Zero-initialised last BN scale (as OpenAI): each block starts as the identity on its residual path.
    out = batch_norm('bn3', train, self.dtype, zero_scale=True)(conv(out_features, 1, 'conv3', self.dtype)(out))
    identity = x
    if self.stride > 1 or x.shape[-1] != out_features:
      identity = conv(out_features, 1, 'downsample_0', self.dtype)(avg_pool(x, self.stride))
      identity = batch_norm('downsample_1', train, self.dtype)(identity)
    return nn.relu(out + identity)


class AttentionPool2d(nn.Module):
  """Multi-head attention over [mean token; spatial tokens] + positional embedding, queried by the mean token."""
  spacial_dim: int  # feature grid side at `image_size` (OpenAI's spelling)
  heads: int
  output_dim: int
  dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    """x: [B, H, W, C] -> [B, output_dim]."""
    batch, height, width, channels = x.shape
    if channels % self.heads:
      raise ValueError(f'feature width {channels} is not divisible by heads {self.heads}')
    head_dim = channels // self.heads
    std = channels**-0.5
    x = x.reshape(batch, height * width, channels)
    x = jnp.concatenate([x.mean(axis=1, keepdims=True), x], axis=1)
    pos = self.param('positional_embedding', nn.initializers.normal(std), (self.spacial_dim**2 + 1, channels))
    x = x + resize_positional_embedding(pos, self.spacial_dim, (height, width)).astype(x.dtype)

    def dense(features: int, name: str) -> nn.Dense:
      return nn.Dense(features, kernel_init=nn.initializers.normal(std), dtype=self.dtype, name=name)

    # Only the mean token's output is used, so only it is projected as a query.
    q = dense(channels, 'q_proj')(x[:, :1]).reshape(batch, 1, self.heads, head_dim)
    k = dense(channels, 'k_proj')(x).reshape(batch, -1, self.heads, head_dim)
    v = dense(channels, 'v_proj')(x).reshape(batch, -1, self.heads, head_dim)
    out = jax.nn.dot_product_attention(q, k, v).reshape(batch, channels)
    return dense(self.output_dim, 'c_proj')(out)


class ModifiedResNet(nn.Module):
  """OpenAI CLIP's ResNet image tower. RN50: stages (3, 4, 6, 3), width 64, heads 32, output_dim 1024."""
  stages: tuple[int, ...]
  width: int
  heads: int  # OpenAI's rule: width * 32 // 64
  output_dim: int
  image_size: int
  dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, images: jax.Array, train: bool = False, with_tokens: bool = True,
               rng: jax.Array | None = None) -> dict[str, jax.Array]:
    """images: [B, H, W, 3] normalised float -> {'embed': [B, d], 'cls': [B, d], 'tokens': [B, h*w, 32 * width]}
    (without `tokens` when `with_tokens` is False: the attention pool needs the whole map anyway).

    `embed` (= `cls`) is the attention-pool output, not normalised; `tokens` is the final feature map (h = H // 32
    for H divisible by 32) before pooling. `train` uses batch statistics in BatchNorm and, with
    `mutable=['batch_stats']`, updates the running averages. Inputs whose size differs from `image_size` get a
    bicubically interpolated positional embedding. `rng` ([B] keys when training, towers.py) is unused: no
    stochastic option.
    """
    del rng
    x = images.astype(self.dtype)
    for i, features in enumerate((self.width // 2, self.width // 2, self.width), start=1):
      x = conv(features, 3, f'conv{i}', self.dtype, strides=2 if i == 1 else 1)(x)
      x = nn.relu(batch_norm(f'bn{i}', train, self.dtype)(x))
    x = avg_pool(x, 2)
    for stage, blocks in enumerate(self.stages):
      for block in range(blocks):
        stride = 2 if stage > 0 and block == 0 else 1
        x = Bottleneck(self.width * 2**stage, stride, self.dtype, name=f'layer{stage + 1}_{block}')(x, train)
    batch, height, width, channels = x.shape
    embed = AttentionPool2d(self.image_size // 32, self.heads, self.output_dim, self.dtype, name='attnpool')(x)
    out = {'embed': embed, 'cls': embed}
    return {**out, 'tokens': x.reshape(batch, height * width, channels)} if with_tokens else out


@VISION_TOWERS.register('resnet')
class ResNetTower(VisionTower):
  """OpenAI's modified ResNet: stages (4 stage depths), width (the stem's), heads (of the attention pool) and
  image_size (a multiple of 32). No patch tokens and no transformer blocks: it locks whole, patch dropout and the
  patch-token evaluations do not apply."""

  @classmethod
  def options(cls, image_size: int, stages: tuple[int, ...], width: int) -> dict:
    """A preset's config.model.vision for this tower, with OpenAI's rule for the attention-pool heads. The keys this
    tower does not use keep their defaults (every tower config has the same shared keys)."""
    return dict(cls.default_config(), image_size=image_size, width=width, heads=width * 32 // 64, stages=stages)

  @classmethod
  def validate(cls, vision: ml_collections.ConfigDict, model: ml_collections.ConfigDict) -> None:
    super().validate(vision, model)
    if len(vision.stages) != 4 or vision.image_size % 32:
      raise ValueError(f'config.model.vision.stages={tuple(vision.stages)} must list 4 stage depths and '
                       f'config.model.vision.image_size={vision.image_size} must be a multiple of 32 for a ResNet '
                       'tower')

  @classmethod
  def build(cls, vision, embed_dim: int, act: str, dtype: Any, stack: BlockStack) -> ModifiedResNet:
    del act, stack  # OpenAI's ResNet towers use ReLU and have no transformer blocks to remat or scan
    return ModifiedResNet(tuple(vision.stages), vision.width, vision.heads, embed_dim, vision.image_size, dtype)
