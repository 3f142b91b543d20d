"""The SigLIP 2 presets have the shapes of open_clip's `ViT-*-SigLIP2*` model configs: the text tower's from the json,
the image tower's from the timm model the json names (its `model_args` read from timm's source, not imported). Shapes
only: our models are traced with `jax.eval_shape` (blocks scanned, so that a 40-block tower traces one block), never
built. Skipped without open_clip or timm installed."""
import ast
import functools
import importlib.util
import json
import os
import re

import jax
import pytest

from vlp_jax import models


def _package_folder(name: str) -> str:
  spec = importlib.util.find_spec(name)  # finds, does not import (open_clip would import torch)
  if spec is None or not spec.origin:
    pytest.skip(f'{name} is not installed; its files are the reference')
  return os.path.dirname(spec.origin)


@functools.lru_cache(maxsize=1)
def _timm_vit_model_args(folder: str) -> dict[str, dict]:
  """{timm model function name: its `model_args = dict(...)`} in timm's vision_transformer.py."""
  with open(os.path.join(folder, 'models', 'vision_transformer.py'), encoding='utf-8') as f:
    tree = ast.parse(f.read())
  out = {}
  for node in tree.body:
    if isinstance(node, ast.FunctionDef):
      for statement in ast.walk(node):
        if (isinstance(statement, ast.Assign) and getattr(statement.targets[0], 'id', None) == 'model_args'
            and isinstance(statement.value, ast.Call)):
          out[node.name] = {kw.arg: _literal(kw.value) for kw in statement.value.keywords}
  return out


def _literal(node: ast.expr):
  try:
    return ast.literal_eval(node)
  except ValueError:  # a callable (a norm layer) is no shape
    return None


def _our_shapes(name: str) -> tuple[dict, dict]:
  """({path: shape} of preset `name`'s parameters with each tower's scanned blocks as one, {tower: block count})."""
  config = models.preset(name, scan_layers=True)
  params, _ = jax.eval_shape(lambda: models.init_variables(models.build_model(config), jax.random.key(0)))
  flat = {'/'.join(str(k.key) for k in path): tuple(leaf.shape)
          for path, leaf in jax.tree_util.tree_flatten_with_path(params)[0]}
  blocks = {}
  for tower, prefix in (('vision', 'visual/transformer/'), ('text', 'transformer/')):
    scanned = flat.get(f'{prefix}resblocks/ln_1/scale', (0,))[0]
    single = {m.group(1) for path in flat if (m := re.match(f'^{prefix}(resblocks_\\d+)/', path))}
    blocks[tower] = scanned + len(single)
  return flat, blocks


def test_siglip2_presets_have_open_clips_shapes():
  config_folder = os.path.join(_package_folder('open_clip'), 'model_configs')
  timm_args = _timm_vit_model_args(_package_folder('timm'))
  names = sorted(f[:-len('.json')] for f in os.listdir(config_folder) if re.match(r'^ViT-.*-SigLIP2.*\.json$', f))
  assert len(names) >= 14 and set(names) <= set(models.PRESETS), sorted(set(names) - set(models.PRESETS))
  for name in names:
    with open(os.path.join(config_folder, f'{name}.json'), encoding='utf-8') as f:
      theirs = json.load(f)
    vision, text = theirs['vision_cfg'], theirs['text_cfg']
    trunk = timm_args[vision['timm_model_name']]
    ours = models.preset(name)
    shapes, blocks = _our_shapes(name)
    width, patch, size = trunk['embed_dim'], trunk['patch_size'], vision['image_size']
    vision_hidden = int(width * trunk.get('mlp_ratio', 4.0))
    text_width = text['width']
    text_hidden = int(text_width * text.get('mlp_ratio', 4.0))
    want = {
        'visual/conv1/kernel': (patch, patch, 3, width),
        'visual/positional_embedding': ((size // patch) ** 2, width),
        'visual/attn_pool/probe': (1, 1, width),
        'visual/attn_pool/mlp/c_fc/kernel': (width, vision_hidden),
        'token_embedding/embedding': (text['vocab_size'], text_width),
        'positional_embedding': (text['context_length'], text_width),
        'text_projection': (text_width, theirs['embed_dim']),
        'text_projection_bias': (theirs['embed_dim'],),
    }
    assert {k: shapes[k] for k in want} == want, name
    last_vision, last_text = f'resblocks_{blocks["vision"] - 1}', f'resblocks_{blocks["text"] - 1}'
    assert shapes[f'visual/transformer/{last_vision}/mlp/c_fc/kernel'] == (width, vision_hidden), name
    assert shapes[f'transformer/{last_text}/mlp/c_fc/kernel'] == (text_width, text_hidden), name
    assert blocks == {'vision': trunk['depth'], 'text': text['layers']}, name
    assert (ours.vision.image_size, ours.vision.patch_size) == (size, patch), name
    assert (ours.vision.heads, ours.text.heads) == (trunk['num_heads'], text['heads']), name
    assert ours.embed_dim == theirs['embed_dim'] and ours.init_logit_bias == theirs['init_logit_bias'], name
    # SigLIP's text tower: bidirectional, pooled at the last token, a biased projection, tanh GELU, LayerNorm eps
    assert (ours.text.causal, ours.text.pool, ours.text.proj_bias) == (
        not text['no_causal_mask'], text['pool_type'], text['proj_bias']), name
    assert ours.act == 'gelu_tanh' and text['act_kwargs'] == {'approximate': 'tanh'}, name
    assert ours.text.ln_eps == ours.vision.ln_eps == text['norm_kwargs']['eps'], name
    # Gemma's tokenizer (open_clip's names the SigLIP 2 hub model's, a GemmaTokenizer), 256k ids
    assert ours.text.tokenizer == 'gemma' and text['vocab_size'] == 256_000, name
