"""big_vision's two-tower `.npz` files (SigLIP and SigLIP 2) both ways, and open_clip's SigLIP 2 models both ways.

big_vision itself is not on PyPI, so the reference reader of our big_vision exports is open_clip's
`convert.load_big_vision_weights`: an independent implementation of the same layout, the one open_clip converts
Google's released `.npz` files with. A file our export writes must load there into an open_clip SigLIP model of the
same shapes (timm image trunk) and embed the same images and texts (its image tower also in timm's own reader of
big_vision ViTs, `vision_transformer._load_weights`); our import of it must give back our parameters bit for bit.
Skipped without torch and open_clip (and timm, which open_clip builds SigLIP image trunks with).
"""
import sys

import jax
import ml_dtypes
import numpy as np
import pytest

from vlp_jax import models
from vlp_jax.checkpoint_files import load_variables
from vlp_jax.config import base_config
from vlp_jax.interchange import export_weights, import_weights, save_checkpoint
from vlp_jax.models import interchange
from vlp_jax.models.interchange import WeightsError
from vlp_jax.training.checkpoint import load_config

from support import import_open_clip_module, randomize_torch_weights

PARITY_ATOL = 1e-4
IMAGE_SIZE = 64  # a 4 x 4 grid of 16 px patches: timm's base SigLIP trunk at a small input
VOCAB = 1000  # SigLIP 2's 256k Gemma vocabulary would make a 200M-parameter embedding table


def _small_preset(monkeypatch, name, text_width=768, text_heads=12):
  """Preset `name` shrunk in place to two blocks per tower, IMAGE_SIZE and VOCAB (the width of timm's base trunk
  kept); returns its model config."""
  spec = {k: dict(v) if isinstance(v, dict) else v for k, v in models.PRESETS[name].items()}
  spec['vision'].update(layers=2, image_size=IMAGE_SIZE)
  spec['text'].update(layers=2, vocab_size=VOCAB, width=text_width, heads=text_heads)
  monkeypatch.setitem(models.PRESETS, name, spec)
  return models.preset(name)


def _base_trunk(timm, seed=0):
  """timm's base SigLIP ViT as open_clip's TimmModel asks for it (MAP pooling, no classifier), at IMAGE_SIZE with two
  blocks and the tanh GELU."""
  torch = sys.modules['torch']
  torch.manual_seed(seed)
  return timm.create_model('vit_base_patch16_siglip_224', pretrained=False, num_classes=0, global_pool='map',
                           img_size=IMAGE_SIZE, depth=2, act_layer='gelu_tanh').eval()


def _open_clip_siglip(torch, text_width=768, text_heads=12, seed=0):
  """An open_clip SigLIP model (CustomTextCLIP: timm's base SigLIP trunk, open_clip's text tower, as open_clip's
  `ViT-B-16-SigLIP*` configs) with two blocks per tower, IMAGE_SIZE, VOCAB and random weights, and the tanh GELU
  of the SigLIP checkpoints in both towers."""
  oc_model = import_open_clip_module('model')
  if getattr(sys.modules.get('open_clip.timm_model'), 'timm', None) is None:
    pytest.skip('timm is not installed; open_clip builds its SigLIP image trunk with it')
  vision = oc_model.CLIPVisionCfg(image_size=IMAGE_SIZE, timm_model_name='vit_base_patch16_siglip_224',
                                  timm_model_pretrained=False, timm_pool='map', timm_proj='none')
  text = oc_model.CLIPTextCfg(context_length=64, vocab_size=VOCAB, width=text_width, heads=text_heads, layers=2,
                              no_causal_mask=True, proj_bias=True, pool_type='last', norm_kwargs={'eps': 1e-6},
                              act_kwargs={'approximate': 'tanh'})
  torch.manual_seed(seed)
  model = oc_model.CustomTextCLIP(768, vision, text, init_logit_bias=-10.0)
  # open_clip builds the trunk at the size its timm name says (224 px, 12 blocks); the same trunk at our test size,
  # as open_clip's TimmModel asks timm for it (MAP pooling, no classifier).
  model.visual.trunk = _base_trunk(sys.modules['open_clip.timm_model'].timm)
  return randomize_torch_weights(torch, model, seed)


def _inputs(seed=0):
  rng = np.random.default_rng(seed)
  images = rng.normal(size=(2, IMAGE_SIZE, IMAGE_SIZE, 3)).astype(np.float32)
  tokens = rng.integers(0, VOCAB, size=(2, 64)).astype(np.int32)
  return images, tokens


def _our_embeddings(model_config, params, model_state, images, tokens):
  model = models.build_model(model_config)
  variables = {'params': params, **model_state}
  zi = np.asarray(model.apply(variables, images, method=model.encode_image)['embed'])
  zt = np.asarray(model.apply(variables, tokens, method=model.encode_text)['embed'])
  return zi / np.linalg.norm(zi, axis=-1, keepdims=True), zt / np.linalg.norm(zt, axis=-1, keepdims=True)


def _open_clip_embeddings(torch, model, images, tokens):
  with torch.no_grad():
    zi = model.encode_image(torch.from_numpy(images.transpose(0, 3, 1, 2)), normalize=True).numpy()
    zt = model.encode_text(torch.from_numpy(tokens).long(), normalize=True).numpy()
  return zi, zt


def _assert_close(got, want, what):
  errors = [float(np.abs(g - w).max()) for g, w in zip(got, want)]
  print(f'{what}: max abs error image {errors[0]:.2e}, text {errors[1]:.2e}')
  assert max(errors) < PARITY_ATOL, errors


def _random_checkpoint(path, model_config, seed=0):
  """A checkpoint of `model_config`'s model with every parameter random (no zero biases, no unit gains)."""
  params, model_state = models.init_variables(models.build_model(model_config), jax.random.key(seed))
  rng = np.random.default_rng(seed)
  params = jax.tree.map(lambda p: np.asarray(p) + 0.05 * rng.standard_normal(p.shape).astype(np.float32), params)
  config = base_config()
  config.model = model_config
  return save_checkpoint(str(path), params, model_state, config), params


@pytest.mark.slow
@pytest.mark.parametrize('name,stacked', [('ViT-B-16-SigLIP', False), ('ViT-B-16-SigLIP2', True)])
def test_big_vision_export_loads_in_open_clip_and_imports_back_exactly(name, stacked, tmp_path, monkeypatch):
  """A text tower narrower than the joint space (SigLIP 2 g-opt's case: the head projects 384 -> 768 here); SigLIP
  files name each block, SigLIP 2 files stack them (big_vision's scan layout), and open_clip reads both."""
  torch = pytest.importorskip('torch', reason='torch is needed for the big_vision parity test')
  convert = import_open_clip_module('convert')
  model_config = _small_preset(monkeypatch, name, text_width=384, text_heads=6)
  checkpoint, params = _random_checkpoint(tmp_path / 'ours', model_config)
  npz = export_weights('big_vision', checkpoint, str(tmp_path / 'siglip.npz'))
  with np.load(npz) as written:
    assert ('params/txt/Encoder_0/encoderblock/LayerNorm_0/scale' in written.files) == stacked
    assert ('params/img/Transformer/encoderblock_1/LayerNorm_0/scale' in written.files) != stacked
  reference = _open_clip_siglip(torch, text_width=384, text_heads=6, seed=1)
  convert.load_big_vision_weights(reference, npz)
  images, tokens = _inputs()
  ours = _our_embeddings(model_config, params, {}, images, tokens)
  _assert_close(ours, _open_clip_embeddings(torch, reference, images, tokens), f'{name} as big_vision, in open_clip')
  # timm's own reader of big_vision image towers (it finds `params/img/`), a second one, into a fresh trunk
  timm = sys.modules['open_clip.timm_model'].timm
  trunk = _base_trunk(timm, seed=2)
  timm.models.vision_transformer._load_weights(trunk, npz)
  with torch.no_grad():
    pooled = trunk(torch.from_numpy(images.transpose(0, 3, 1, 2))).numpy()
  error = np.abs(pooled / np.linalg.norm(pooled, axis=-1, keepdims=True) - ours[0]).max()
  print(f'{name} image tower as big_vision, in timm: max abs error {error:.2e}')
  assert error < PARITY_ATOL
  np.testing.assert_array_equal(reference.logit_scale.detach().numpy().reshape(()), params['logit_scale'])
  np.testing.assert_array_equal(reference.logit_bias.detach().numpy().reshape(()), params['logit_bias'])
  imported = import_weights('big_vision', name, npz, str(tmp_path / 'imported'))
  got, _ = load_variables(imported)
  assert jax.tree.structure(got) == jax.tree.structure(params)
  jax.tree.map(np.testing.assert_array_equal, got, params)
  assert load_config(imported).model.text.tokenizer == model_config.text.tokenizer


@pytest.mark.slow
def test_open_clip_siglip2_import_parity_and_export_round_trip(tmp_path, monkeypatch):
  """open_clip's SigLIP 2 models (`ViT-*-SigLIP2*`: SigLIP's towers, Gemma's vocabulary) import into the SigLIP 2
  presets and export back to the same tensors."""
  torch = pytest.importorskip('torch', reason='torch is needed for the open_clip SigLIP 2 parity test')
  from safetensors.torch import load_file, save_file
  reference = _open_clip_siglip(torch)
  model_config = _small_preset(monkeypatch, 'ViT-B-16-SigLIP2')
  source = str(tmp_path / 'open_clip.safetensors')
  save_file({k: v.contiguous() for k, v in reference.state_dict().items()}, source)
  ckpt = import_weights('open_clip', 'ViT-B-16-SigLIP2', source, str(tmp_path / 'ckpt'))
  assert load_config(ckpt).model.text.tokenizer == 'gemma'
  params, model_state = load_variables(ckpt)
  images, tokens = _inputs()
  _assert_close(_our_embeddings(model_config, params, model_state, images, tokens),
                _open_clip_embeddings(torch, reference, images, tokens), 'SigLIP 2 (open_clip)')
  exported = load_file(export_weights('open_clip', ckpt, str(tmp_path / 'export.safetensors')))
  want = reference.state_dict()
  assert sorted(exported) == sorted(want)
  for key, value in exported.items():
    np.testing.assert_array_equal(value.numpy(), want[key].numpy(), err_msg=key)


def test_big_vision_names_outside_a_siglip_model_are_listed():
  arrays = {'params/t': np.zeros(1, np.float32), 'params/img/head/kernel': np.zeros((4, 2), np.float32),
            'params/txt/Encoder_0/encoderblock_0/MlpBlock_0/Dense_2/kernel': np.zeros((4, 4), np.float32)}
  with pytest.raises(WeightsError, match=r'2 names .* no place in a SigLIP model: img/head/kernel, '
                                         r'txt/Encoder_0/encoderblock_0/MlpBlock_0/Dense_2/kernel'):
    interchange.big_vision_to_openai(arrays)
  with pytest.raises(WeightsError, match=r'lacks \[.*value/kernel.*\] of the attention .* visual.attn_pool.attn'):
    interchange.big_vision_to_openai({f'img/MAPHead_0/MultiHeadDotProductAttention_0/{p}/{leaf}': np.zeros(1)
                                      for p in ('query', 'key', 'out') for leaf in ('kernel', 'bias')})


def test_big_vision_refuses_models_it_cannot_hold(tmp_path):
  with pytest.raises(WeightsError, match=r"--model=ViT-B-32 is not such a model: .*'siglip_vit'.*valid choices: "
                                         r"\[.*'ViT-B-16-SigLIP2'"):
    import_weights('big_vision', 'ViT-B-32', str(tmp_path / 'x.npz'), str(tmp_path / 'ckpt'))
  with pytest.raises(WeightsError, match=r"big_vision's files end in .npz"):
    import_weights('big_vision', 'ViT-B-16-SigLIP', str(tmp_path / 'x.safetensors'), str(tmp_path / 'ckpt'))
  with pytest.raises(WeightsError, match=r'must end in .npz'):
    export_weights('big_vision', str(tmp_path), str(tmp_path / 'x.safetensors'))
  causal = models.preset('ViT-B-16-SigLIP')
  causal.text.causal = True
  assert 'bidirectional' in interchange.big_vision_problem(causal)
  assert not (tmp_path / 'ckpt').exists()


def test_npz_bfloat16_arrays_read_as_float32(tmp_path):
  """big_vision saves bfloat16 arrays with numpy, which stores them as 2-byte voids."""
  values = np.random.default_rng(0).normal(size=(3, 5)).astype(np.float32)
  as_bf16 = values.astype(ml_dtypes.bfloat16)
  np.savez(tmp_path / 'w.npz', **{'params/t': as_bf16.view('V2'), 'params/b': values})
  read = interchange.read_state_dict(str(tmp_path / 'w.npz'))
  assert read['params/t'].dtype == np.float32
  np.testing.assert_array_equal(read['params/t'], as_bf16.astype(np.float32))
  np.testing.assert_array_equal(read['params/b'], values)
  (tmp_path / 'bad.npz').write_bytes(b'not a zip')
  with pytest.raises(WeightsError, match=r'bad.npz could not be read as an .npz file'):
    interchange.read_state_dict(str(tmp_path / 'bad.npz'))
