"""SigLIP towers and weights: parity with a randomly initialised transformers SiglipModel imported by
`interchange.import_weights` (the model read from its config.json) and with open_clip's (timm trunk), exact export
round trips, the presets' parameter counts, and clear errors when the weights and the preset disagree. Skipped
without torch and transformers."""
import json
import os
import sys

import jax
import numpy as np
import pytest

from vlp_jax import models
from vlp_jax.checkpoint_files import load_variables
from vlp_jax.interchange import export_weights, import_weights
from vlp_jax.models import interchange
from vlp_jax.training.checkpoint import load_config

from support import import_open_clip_module

PARITY_ATOL = 1e-4

# Small, with every option a SigLIP checkpoint can set away from the defaults: an MLP width that is not 4x (So400m's
# case), a patch size that does not divide the image (So400m at 384 px), different towers' depths and heads.
_TEXT = dict(vocab_size=300, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
             max_position_embeddings=16)
_VISION = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=8, image_size=30,
               patch_size=7)


def _reference(transformers, torch, seed=0):
  """A transformers SiglipModel with non-trivial random weights (LayerNorm gains near 1, the rest small noise)."""
  config = transformers.SiglipConfig(text_config=_TEXT, vision_config=_VISION)
  torch.manual_seed(seed)
  model = transformers.SiglipModel(config).eval()
  generator = torch.Generator().manual_seed(seed)
  with torch.no_grad():
    for name, p in model.named_parameters():
      noise = torch.randn(p.shape, generator=generator)
      if 'norm' in name and name.endswith('weight'):
        p.copy_(1 + 0.1 * noise)
      elif name in ('logit_scale', 'logit_bias'):
        p.copy_(noise)
      else:
        p.copy_(0.05 * noise)
  return model


def _inputs(seed=0):
  rng = np.random.default_rng(seed)
  images = rng.normal(size=(3, 30, 30, 3)).astype(np.float32)
  tokens = rng.integers(0, _TEXT['vocab_size'], size=(3, _TEXT['max_position_embeddings'])).astype(np.int32)
  return images, tokens


def _reference_outputs(reference, torch, images, tokens):
  with torch.no_grad():
    out = reference(input_ids=torch.from_numpy(tokens).long(),
                    pixel_values=torch.from_numpy(images.transpose(0, 3, 1, 2)))
  return out.image_embeds.numpy(), out.text_embeds.numpy(), out.logits_per_image.numpy()


def _ours(checkpoint, images, tokens):
  config = load_config(checkpoint).model
  params, model_state = load_variables(checkpoint)
  model = models.build_model(config)
  variables = {'params': params, **model_state}
  zi = np.asarray(model.apply(variables, images, method=model.encode_image)['embed'])
  zt = np.asarray(model.apply(variables, tokens, method=model.encode_text)['embed'])
  zi = zi / np.linalg.norm(zi, axis=-1, keepdims=True)
  zt = zt / np.linalg.norm(zt, axis=-1, keepdims=True)
  logits = zi @ zt.T * np.exp(params['logit_scale']) + params['logit_bias']
  return zi, zt, logits, config


@pytest.mark.slow
def test_hf_siglip_import_parity_and_export_round_trip(tmp_path):
  torch = pytest.importorskip('torch', reason='torch is needed for the SigLIP parity test')
  transformers = pytest.importorskip('transformers', reason='transformers is needed for the SigLIP parity test')
  reference = _reference(transformers, torch)
  folder = str(tmp_path / 'hf')
  reference.save_pretrained(folder)
  (tmp_path / 'hf' / 'spiece.model').write_bytes(b'stand-in: only its path is recorded at import')
  # No model name: the model is read from the folder's config.json.
  ckpt = import_weights('hf', None, folder, str(tmp_path / 'ckpt'))
  images, tokens = _inputs()
  want_i, want_t, want_logits = _reference_outputs(reference, torch, images, tokens)
  got_i, got_t, got_logits, config = _ours(ckpt, images, tokens)
  err_i, err_t = np.abs(got_i - want_i).max(), np.abs(got_t - want_t).max()
  print(f'SigLIP (transformers): max abs error image {err_i:.2e}, text {err_t:.2e}')
  assert err_i < PARITY_ATOL and err_t < PARITY_ATOL
  np.testing.assert_allclose(got_logits, want_logits, atol=1e-3)  # the learned scale and bias came along
  assert config.vision.type == 'siglip_vit' and config.vision.mlp_width == 96 and config.name == 'hf-siglip'
  assert config.text.tokenizer == 'sentencepiece'
  assert config.text.tokenizer_path == os.path.join(os.path.abspath(folder), 'spiece.model')
  # Export gives back every tensor exactly, and transformers reads the folder as the same model.
  out = export_weights('hf', ckpt, str(tmp_path / 'export'))
  loaded = transformers.SiglipModel.from_pretrained(out).eval()
  want_state = reference.state_dict()
  assert sorted(loaded.state_dict()) == sorted(want_state)
  for key, value in loaded.state_dict().items():
    np.testing.assert_array_equal(value.numpy(), want_state[key].numpy(), err_msg=key)
  with open(os.path.join(out, 'config.json')) as f:
    assert not interchange.siglip_mismatches(interchange.siglip_model_config(json.load(f)), config)


@pytest.mark.slow
def test_siglip_import_refuses_a_preset_that_does_not_fit(tmp_path):
  torch = pytest.importorskip('torch', reason='torch is needed for the SigLIP import test')
  transformers = pytest.importorskip('transformers', reason='transformers is needed for the SigLIP import test')
  folder = str(tmp_path / 'hf')
  _reference(transformers, torch).save_pretrained(folder)
  ckpt = tmp_path / 'ckpt'
  with pytest.raises(interchange.WeightsError) as error:
    import_weights('hf', 'ViT-B-16-SigLIP', folder, str(ckpt))
  err = str(error.value)
  for field in ('vision.width: file 64', 'vision.mlp_width: file 96', 'vision.patch_size: file 7',
                'text.vocab_size: file 300', 'text.context_length: file 16'):
    assert field in err
  assert not ckpt.exists()  # nothing written
  with pytest.raises(interchange.WeightsError, match='does not match --model=ViT-B-32'):
    import_weights('hf', 'ViT-B-32', folder, str(ckpt))
  assert not ckpt.exists()


def test_siglip_config_json_round_trip_names_the_preset():
  for name in ('ViT-B-16-SigLIP', 'ViT-SO400M-14-SigLIP-384', 'ViT-L-16-SigLIP-256'):
    config = interchange.siglip_model_config(interchange.hf_siglip_config(models.preset(name)))
    assert config.name == name
    assert not interchange.siglip_mismatches(config, models.preset(name))


@pytest.mark.slow
@pytest.mark.parametrize('name', ['ViT-B-16-SigLIP', 'ViT-SO400M-14-SigLIP-384'])
def test_siglip_preset_parameter_counts_equal_transformers(name):
  torch = pytest.importorskip('torch', reason='torch is needed to count the reference parameters')
  transformers = pytest.importorskip('transformers', reason='transformers is needed for the reference')
  # transformers' SiglipModel, built on the meta device (shapes only) from our exported config.json; its published
  # sizes pin the config: ViT-B/16 203.16M, So400m/14 at 384 px 877.96M parameters.
  with torch.device('meta'):
    reference = transformers.SiglipModel(transformers.SiglipConfig.from_dict(
        interchange.hf_siglip_config(models.preset(name))))
  want = sum(p.numel() for p in reference.parameters())
  model = models.build_model(models.preset(name))
  params, _ = jax.eval_shape(lambda: models.init_variables(model, jax.random.key(0)))
  got = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(params))
  assert got == want, f'{name}: {got:,} parameters, transformers {want:,}'
  assert got == {'ViT-B-16-SigLIP': 203_155_970, 'ViT-SO400M-14-SigLIP-384': 877_960_498}[name]


def _open_clip_siglip(torch):
  """open_clip's ViT-B-16-SigLIP (a timm trunk and open_clip's text tower) with two blocks per tower, random
  weights, and the tanh GELU the SigLIP checkpoints were trained with (big_vision's; transformers' SiglipModel and
  vlp_jax use it) in every MLP. Stock open_clip runs the exact GELU in both towers (timm's SigLIP ViTs and
  open_clip's text config choose it), which moves these random-weight embeddings by about 1e-3: an approximation
  of open_clip's, not a difference in the weights, which is what this test checks."""
  oc_model = import_open_clip_module('model')
  if getattr(sys.modules.get('open_clip.timm_model'), 'timm', None) is None:
    pytest.skip('timm is not installed; open_clip builds its SigLIP image trunk with it')
  vision = oc_model.CLIPVisionCfg(image_size=224, timm_model_name='vit_base_patch16_siglip_224',
                                  timm_model_pretrained=False, timm_pool='map', timm_proj='none')
  text = oc_model.CLIPTextCfg(context_length=64, vocab_size=32000, width=768, heads=12, layers=2, no_causal_mask=True,
                              proj_bias=True, pool_type='last', norm_kwargs={'eps': 1e-6},
                              act_kwargs={'approximate': 'tanh'})
  torch.manual_seed(0)
  model = oc_model.CustomTextCLIP(768, vision, text, init_logit_bias=-10.0)
  model.visual.trunk.blocks = model.visual.trunk.blocks[:2]
  for module in model.visual.trunk.modules():
    if isinstance(module, torch.nn.GELU):
      module.approximate = 'tanh'
  generator = torch.Generator().manual_seed(0)
  with torch.no_grad():
    for name, p in model.named_parameters():
      noise = torch.randn(p.shape, generator=generator)
      p.copy_(1 + 0.1 * noise if ('norm' in name or 'ln_' in name) and name.endswith('weight') else 0.05 * noise)
  return model.eval()


@pytest.mark.slow
def test_open_clip_siglip_import_parity_and_export(tmp_path, monkeypatch):
  torch = pytest.importorskip('torch', reason='torch is needed for the open_clip SigLIP parity test')
  reference = _open_clip_siglip(torch)
  spec = {k: dict(v) if isinstance(v, dict) else v for k, v in models.PRESETS['ViT-B-16-SigLIP'].items()}
  spec['vision']['layers'] = spec['text']['layers'] = 2
  monkeypatch.setitem(models.PRESETS, 'ViT-B-16-SigLIP', spec)
  from safetensors.torch import load_file, save_file
  source = str(tmp_path / 'open_clip.safetensors')
  save_file({k: v.contiguous() for k, v in reference.state_dict().items()}, source)
  ckpt = import_weights('open_clip', 'ViT-B-16-SigLIP', source, str(tmp_path / 'ckpt'))
  rng = np.random.default_rng(0)
  images = rng.normal(size=(2, 224, 224, 3)).astype(np.float32)
  tokens = rng.integers(0, 32000, size=(2, 64)).astype(np.int32)
  with torch.no_grad():
    want_i = reference.encode_image(torch.from_numpy(images.transpose(0, 3, 1, 2)), normalize=True).numpy()
    want_t = reference.encode_text(torch.from_numpy(tokens).long(), normalize=True).numpy()
  got_i, got_t, _, _ = _ours(ckpt, images, tokens)
  err_i, err_t = np.abs(got_i - want_i).max(), np.abs(got_t - want_t).max()
  print(f'SigLIP (open_clip): max abs error image {err_i:.2e}, text {err_t:.2e}')
  assert err_i < PARITY_ATOL and err_t < PARITY_ATOL
  exported = load_file(export_weights('open_clip', ckpt, str(tmp_path / 'export.safetensors')))
  want_state = reference.state_dict()
  assert sorted(exported) == sorted(want_state)
  for key, value in exported.items():
    np.testing.assert_array_equal(value.numpy(), want_state[key].numpy(), err_msg=key)
