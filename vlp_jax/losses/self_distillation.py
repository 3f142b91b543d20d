"""The two self-distillation losses SigLIP 2 adds late in training (objectives/siglip2.py), as pure functions.

Both compare an EMA teacher's output with the student's through the same cross-entropy, the one DINO (Caron et al.
2021, Eq. 1-2) defines, which SILC takes for its local-to-global loss and TIPS (and iBOT before it) applies per
patch: the teacher's head output t is centred and sharpened into a target distribution, the student's s is
softened into a prediction,

    P_t = softmax((t - c) / tau_t)      P_s = softmax(s / tau_s)      H(P_t, P_s) = -sum_k P_t[k] log P_s[k],

over the K prototypes of the heads. The centre c, a running mean of the teacher's outputs, keeps the teacher from
collapsing onto one prototype; `updated_center` moves it. The target carries no gradient.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp


def soft_cross_entropy(teacher: jax.Array, student: jax.Array, center: jax.Array, teacher_temp: float,
                       student_temp: float) -> jax.Array:
  """H(P_t, P_s) per row: teacher, student [..., K] logits (broadcasting), center [K] -> [...]. The teacher's
  softmax is taken without gradient."""
  target = jax.lax.stop_gradient(jax.nn.softmax((teacher - center) / teacher_temp, axis=-1))
  return -jnp.sum(target * jax.nn.log_softmax(student / student_temp, axis=-1), axis=-1)


def local_to_global_loss(teacher: jax.Array, student: jax.Array, center: jax.Array, teacher_temp: float,
                         student_temp: float) -> jax.Array:
  """SILC's local-to-global self-distillation: every local crop of an image predicts the teacher's output on the
  image's global view.

  teacher: [B, K] head logits of the teacher on the global view; student: [B, V, K] head logits of the student on
  V local crops of the same images; center: [K]. Returns the mean over images and crops of H(P_t[b], P_s[b, v]).
  """
  return jnp.mean(soft_cross_entropy(teacher[:, None], student, center, teacher_temp, student_temp))


def masked_patch_loss(teacher: jax.Array, student: jax.Array, mask: jax.Array, center: jax.Array,
                      teacher_temp: float, student_temp: float) -> jax.Array:
  """TIPS's masked image modelling (iBOT's loss): at every masked patch, the student, which saw a mask token there,
  predicts the teacher's output for that patch of the unmasked view.

  teacher, student: [B, N, K] per-patch head logits; mask: [B, N] bool, True where the student's patch was masked;
  center: [K]. Each image's loss is the mean of H over its masked patches (an image with none counts 0), and the
  result the mean over images.
  """
  per_patch = soft_cross_entropy(teacher, student, center, teacher_temp, student_temp)
  weights = mask.astype(per_patch.dtype)
  per_image = jnp.sum(per_patch * weights, axis=-1) / jnp.maximum(jnp.sum(weights, axis=-1), 1.0)
  return jnp.mean(per_image)


def updated_center(center: jax.Array, teacher: jax.Array, momentum: float) -> jax.Array:
  """DINO's centre update: center [K], teacher [..., K] logits of the whole batch -> [K],
  momentum * center + (1 - momentum) * (the mean of the teacher's rows)."""
  mean = jnp.mean(teacher.reshape(-1, teacher.shape[-1]), axis=0)
  return momentum * center + (1.0 - momentum) * jax.lax.stop_gradient(mean)
