"""Weight interchange (vlp_jax/interchange.py, models/interchange/): parity with open_clip and transformers on the
same random weights, export -> import identity, and clear errors for wrong names, keys and shapes. Parity tests skip
when torch, transformers or open_clip is not installed; the weights command itself is tested in
tests/integration/test_weights_command.py."""
import importlib.util
import json
import os
import subprocess
import sys

import jax
import numpy as np
from PIL import Image
import pytest

import vlp_jax
from vlp_jax import errors, models
from vlp_jax.config import base_config
from vlp_jax.data.image import image_ops
from vlp_jax.data.text.clip_bpe import default_tokenizer
from vlp_jax.data.text.siglip_sentencepiece import SentencePieceTokenizer
from vlp_jax.inference import preprocess_image
from vlp_jax.interchange import export_weights, import_weights, save_checkpoint
from vlp_jax.models import interchange
from vlp_jax.models.interchange import WeightsError
from vlp_jax.training.checkpoint import load_config
from vlp_jax.checkpoint_files import load_variables

from support import ROOT, import_open_clip_module

CAPTIONS = ['a photo of a cat', 'Ünïcödé & <b>HTML</b> caption!!', '', 'a diagram ' * 40]
PARITY_ATOL = 1e-4


def _randomize(torch_model, seed=0):
  """Non-trivial weights everywhere: LayerNorm/BatchNorm gains near 1, everything else small noise, BN stats."""
  import torch
  generator = torch.Generator().manual_seed(seed)
  with torch.no_grad():
    for name, p in torch_model.named_parameters():
      noise = torch.randn(p.shape, generator=generator)
      if name.endswith('logit_scale'):
        p.fill_(np.log(1 / 0.07))
      elif p.ndim == 1 and ('ln' in name or 'bn' in name or 'norm' in name) and name.endswith('weight'):
        p.copy_(1 + 0.1 * noise)
      else:
        p.copy_(0.02 * noise)
    for name, b in torch_model.named_buffers():
      if name.endswith('running_mean'):
        b.copy_(0.1 * torch.randn(b.shape, generator=generator))
      elif name.endswith('running_var'):
        b.copy_(0.5 + torch.rand(b.shape, generator=generator))
  return torch_model.eval()


def _inputs(image_size, seed=0):
  rng = np.random.default_rng(seed)
  return rng.normal(size=(2, image_size, image_size, 3)).astype(np.float32), default_tokenizer()(CAPTIONS)


def _our_embeddings(config, params, model_state, images, tokens):
  model = models.build_model(config)
  variables = {'params': params, **model_state}
  zi = model.apply(variables, images, method=model.encode_image)['embed']
  zt = model.apply(variables, tokens, method=model.encode_text)['embed']
  normalize = lambda x: np.asarray(x) / np.linalg.norm(np.asarray(x), axis=-1, keepdims=True)  # noqa: E731
  return normalize(zi), normalize(zt)


def _open_clip_model(name, fmt='open_clip'):
  oc_model = import_open_clip_module('model')  # first: skips the test without torch or open_clip
  import torch
  config = interchange.model_config_for(name, fmt)
  v, t = config.vision, config.text
  if v.type == 'vit':
    vision = oc_model.CLIPVisionCfg(image_size=v.image_size, patch_size=v.patch_size, width=v.width, layers=v.layers,
                                    head_width=v.width // v.heads)
  else:
    vision = oc_model.CLIPVisionCfg(image_size=v.image_size, layers=tuple(v.stages), width=v.width)
  text = oc_model.CLIPTextCfg(context_length=t.context_length, vocab_size=t.vocab_size, width=t.width,
                              heads=t.heads, layers=t.layers)
  torch.manual_seed(0)
  return config, _randomize(oc_model.CLIP(config.embed_dim, vision, text, quick_gelu=config.act == 'quick_gelu'))


def _open_clip_parameter_count(name):
  """Parameters of open_clip's model `name` built from open_clip's own JSON config (not from our preset), on
  torch's meta device: shapes only, so ViT-H-14 costs no memory."""
  oc_model = import_open_clip_module('model')  # first: skips the test without torch or open_clip
  import torch
  spec = importlib.util.find_spec('open_clip')
  with open(os.path.join(spec.submodule_search_locations[0], 'model_configs', f'{name}.json')) as f:
    cfg = json.load(f)
  with torch.device('meta'):
    model = oc_model.CLIP(cfg['embed_dim'], oc_model.CLIPVisionCfg(**cfg['vision_cfg']),
                          oc_model.CLIPTextCfg(**cfg['text_cfg']))
  return sum(p.numel() for p in model.parameters())


@pytest.mark.slow
@pytest.mark.parametrize('name', ['ViT-S-32', 'ViT-S-16', 'ViT-B-32', 'ViT-B-16', 'ViT-L-14', 'ViT-L-16',
                                  'ViT-H-14', 'RN50'])
def test_preset_parameter_counts_equal_open_clip(name):
  want = _open_clip_parameter_count(name)
  model = models.build_model(models.preset(name))
  params, model_state = jax.eval_shape(lambda: models.init_variables(model, jax.random.key(0)))
  got = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(params))
  assert got == want, f'{name}: {got:,} parameters, open_clip {want:,}'


def _torch_state_dict(module):
  return {k: v.detach().float().numpy() for k, v in module.state_dict().items()}


def _shallow(monkeypatch, name):
  """The preset `name` with fewer blocks (every width, head count and size kept): the key mapping and the
  numerics are per block, so two blocks per tower check what twelve do, in a fraction of the time. ViT-B-32 keeps
  its full depth in the first parity case."""
  spec = {k: dict(v) if isinstance(v, dict) else v for k, v in models.PRESETS[name].items()}
  spec['text']['layers'] = 2
  if spec['vision']['type'] == 'vit':
    spec['vision']['layers'] = 2
    # A 4 x 4 patch grid: the parity of the patch and positional embeddings is per token, as of the blocks.
    spec['vision']['image_size'] = 4 * spec['vision']['patch_size']
  else:
    spec['vision']['stages'] = (2, 1, 1, 1)  # a stage with a second block, whose shortcut has no downsampling
  monkeypatch.setitem(models.PRESETS, name, spec)


@pytest.mark.parametrize('name,fmt,shallow', [('ViT-B-32', 'open_clip', False),
                                              ('ViT-B-32-quickgelu', 'open_clip', True), ('RN50', 'openai', True),
                                              ('ViT-S-16', 'open_clip', True), ('ViT-H-14', 'open_clip', True)])
@pytest.mark.slow
def test_open_clip_parity(name, fmt, shallow, tmp_path, monkeypatch):
  torch = pytest.importorskip('torch', reason='torch is needed for the open_clip parity tests')
  if shallow:
    _shallow(monkeypatch, name)
  config, reference = _open_clip_model(name, fmt)
  images, tokens = _inputs(config.vision.image_size)
  oc_tokens = import_open_clip_module('tokenizer').tokenize(CAPTIONS).numpy()
  np.testing.assert_array_equal(tokens, oc_tokens)  # our tokenizer gives open_clip's ids
  with torch.no_grad():
    want_i = reference.encode_image(torch.from_numpy(images.transpose(0, 3, 1, 2)), normalize=True).numpy()
    want_t = reference.encode_text(torch.from_numpy(tokens).long(), normalize=True).numpy()
  # Through a file, as a user would: OpenAI state dicts as a torch file with OpenAI's extra scalars (read with
  # weights_only), open_clip ones as safetensors.
  state_dict = {k: v.contiguous() for k, v in reference.state_dict().items()}
  if fmt == 'openai':
    source = str(tmp_path / 'openai.pt')
    torch.save({**state_dict, 'input_resolution': torch.tensor(224), 'context_length': torch.tensor(77),
                'vocab_size': torch.tensor(49408)}, source)
  else:
    from safetensors.torch import save_file
    source = str(tmp_path / 'open_clip.safetensors')
    save_file(state_dict, source)
  ckpt = import_weights(fmt, name, source, str(tmp_path / 'ckpt'))
  assert load_config(ckpt).model.act == config.act
  params, model_state = load_variables(ckpt)
  got_i, got_t = _our_embeddings(load_config(ckpt).model, params, model_state, images, tokens)
  err_i, err_t = np.abs(got_i - want_i).max(), np.abs(got_t - want_t).max()
  print(f'{name} ({fmt}): max abs error image {err_i:.2e}, text {err_t:.2e}')
  assert err_i < PARITY_ATOL and err_t < PARITY_ATOL
  # Export is accepted by open_clip strictly, and gives back the same tensors.
  out = export_weights('open_clip', ckpt, str(tmp_path / 'export.safetensors'))
  from safetensors.torch import load_file
  _, fresh = _open_clip_model(name, fmt)
  fresh.load_state_dict(load_file(out), strict=True)
  for key, value in reference.state_dict().items():
    np.testing.assert_array_equal(fresh.state_dict()[key].numpy(), value.numpy(), err_msg=key)


@pytest.mark.slow
def test_hf_parity_and_export(tmp_path, monkeypatch):
  torch = pytest.importorskip('torch', reason='torch is needed for the transformers parity test')
  transformers = pytest.importorskip('transformers', reason='transformers is needed for the HF parity test')
  _shallow(monkeypatch, 'ViT-B-32-quickgelu')
  config = models.preset('ViT-B-32-quickgelu')
  hf_config = transformers.CLIPConfig.from_dict(interchange.hf_config(config))
  torch.manual_seed(0)
  reference = _randomize(transformers.CLIPModel(hf_config))
  images, tokens = _inputs(config.vision.image_size, seed=1)
  attention = torch.ones(tokens.shape, dtype=torch.long)
  with torch.no_grad():
    out = reference(input_ids=torch.from_numpy(tokens).long(), attention_mask=attention,
                    pixel_values=torch.from_numpy(images.transpose(0, 3, 1, 2)))
  source = str(tmp_path / 'hf.safetensors')
  from safetensors.torch import save_file
  save_file({k: v.contiguous() for k, v in reference.state_dict().items()}, source)
  ckpt = import_weights('hf', 'ViT-B-32-quickgelu', source, str(tmp_path / 'ckpt'))
  params, model_state = load_variables(ckpt)
  got_i, got_t = _our_embeddings(config, params, model_state, images, tokens)
  err_i = np.abs(got_i - out.image_embeds.numpy()).max()
  err_t = np.abs(got_t - out.text_embeds.numpy()).max()
  print(f'HF ViT-B-32: max abs error image {err_i:.2e}, text {err_t:.2e}')
  assert err_i < PARITY_ATOL and err_t < PARITY_ATOL
  folder = export_weights('hf', ckpt, str(tmp_path / 'hf_export'))
  loaded = transformers.CLIPModel.from_pretrained(folder).eval()
  with torch.no_grad():
    again = loaded(input_ids=torch.from_numpy(tokens).long(), attention_mask=attention,
                   pixel_values=torch.from_numpy(images.transpose(0, 3, 1, 2)))
  np.testing.assert_allclose(again.image_embeds.numpy(), out.image_embeds.numpy(), atol=1e-6)
  np.testing.assert_allclose(again.text_embeds.numpy(), out.text_embeds.numpy(), atol=1e-6)


def _full_config(model_config):
  config = base_config()
  config.model = model_config
  return config


def _micro_config():
  config = models.preset('tiny')
  config.update(embed_dim=16)
  config.vision.update(image_size=16, patch_size=8, width=16, layers=1, heads=2)
  config.text.update(context_length=12, width=16, layers=1, heads=2)
  return config


@pytest.mark.slow
@pytest.mark.parametrize('fmt', ['open_clip', 'hf'])
def test_export_reimport_embed_is_bit_identical(fmt, tmp_path):
  config = _micro_config()
  params, state = models.init_variables(models.build_model(config), jax.random.key(3))
  params, state = jax.tree.map(np.asarray, params), jax.tree.map(np.asarray, state)
  ckpt = save_checkpoint(str(tmp_path / 'a'), params, state, _full_config(config))
  exported = export_weights(fmt, ckpt, str(tmp_path / ('b.safetensors' if fmt == 'open_clip' else 'b')))
  source = exported if fmt == 'open_clip' else os.path.join(exported, 'model.safetensors')
  state_dict = interchange.read_state_dict(source)
  if fmt == 'hf':
    assert json.load(open(os.path.join(exported, 'config.json')))['vision_config']['patch_size'] == 8
    state_dict = interchange.hf_to_openai(state_dict)
  again, again_state = interchange.openai_to_variables(state_dict, config)
  jax.tree.map(np.testing.assert_array_equal, again, params)
  images, tokens = _inputs(16)
  tokens = tokens[:, :12]
  for a, b in zip(_our_embeddings(config, params, state, images, tokens),
                  _our_embeddings(config, again, again_state, images, tokens)):
    np.testing.assert_array_equal(a, b)


@pytest.mark.slow
def test_mismatched_weights_list_every_problem():
  config = _micro_config()
  params, state = models.init_variables(models.build_model(config), jax.random.key(0))
  state_dict = interchange.variables_to_openai(jax.tree.map(np.asarray, params), state)
  del state_dict['ln_final.weight']
  state_dict['visual.extra_head.weight'] = np.zeros((3, 3), np.float32)
  state_dict['text_projection'] = np.zeros((16, 99), np.float32)
  with pytest.raises(WeightsError) as error:
    interchange.openai_to_variables(state_dict, config)
  message = str(error.value)
  assert 'visual.extra_head.weight' in message and 'ln_final/scale' in message and 'text_projection' in message
  assert '1 unexpected keys' in message and '1 missing parameters' in message and '1 shape mismatches' in message


@pytest.mark.slow
def test_wrong_model_name_and_existing_output(tmp_path):
  source = tmp_path / 'w.safetensors'
  from safetensors.numpy import save_file
  save_file({'logit_scale': np.zeros((), np.float32)}, str(source))
  with pytest.raises(Exception, match='ViT-Q-7') as error:
    import_weights('open_clip', 'ViT-Q-7', str(source), str(tmp_path / 'x'))
  assert errors.exit_code(error.value) == errors.EXIT_CONFIG and 'ViT-B-32' in models.PRESETS  # a bad request
  (tmp_path / 'exists').mkdir()
  config = _micro_config()
  params, state = models.init_variables(models.build_model(config), jax.random.key(0))
  with pytest.raises(WeightsError, match='exists; choose a new --output'):  # a bad request: exit code 2
    save_checkpoint(str(tmp_path / 'exists'), params, state, _full_config(config))


class _Payload:  # an arbitrary object: loading it would need unpickling code
  pass


def test_torch_files_are_read_with_weights_only(tmp_path):
  torch = pytest.importorskip('torch', reason='torch is needed to write .pt files')
  path = str(tmp_path / 'w.pt')
  torch.save({'state_dict': {'module.logit_scale': torch.tensor(2.0)}}, path)
  assert interchange.read_state_dict(path) == {'logit_scale': np.float32(2.0)}
  torch.save({'x': _Payload()}, str(tmp_path / 'evil.pt'))
  with pytest.raises(Exception, match='(?i)weights_only|unsupported|global'):
    interchange.read_state_dict(str(tmp_path / 'evil.pt'))


def test_key_mapping_rules():
  assert interchange.torch_key_to_path('visual.transformer.resblocks.3.attn.in_proj_weight', 2) == (
      'params', ('visual', 'transformer', 'resblocks_3', 'attn', 'in_proj', 'kernel'), 'linear')
  assert interchange.torch_key_to_path('visual.layer2.0.downsample.1.running_var', 1) == (
      'batch_stats', ('visual', 'layer2_0', 'downsample_1', 'var'), 'same')
  assert interchange.torch_key_to_path('visual.conv1.weight', 4)[2] == 'conv'
  assert interchange.path_to_torch_key('params', ('transformer', 'resblocks_0', 'ln_1', 'scale'), 1) == (
      'transformer.resblocks.0.ln_1.weight', 'same')
  assert interchange.path_to_torch_key('params', ('token_embedding', 'embedding'), 2) == (
      'token_embedding.weight', 'same')


@pytest.mark.slow
def test_export_keeps_only_the_towers(tmp_path):
  config = _micro_config()
  params, state = models.init_variables(models.build_model(config), jax.random.key(0))
  params = {**jax.tree.map(np.asarray, params), 'logit_bias': np.float32(-10.0),
            'simclr_head': {'layer1': {'kernel': np.zeros((16, 8), np.float32)}}}
  state = {'ema': {'logit_scale': np.float32(1.0)}}
  ckpt = save_checkpoint(str(tmp_path / 'a'), params, state, _full_config(config))
  out = export_weights('open_clip', ckpt, str(tmp_path / 'b.safetensors'))
  keys = set(interchange.read_state_dict(out))
  assert 'logit_bias' not in keys and not any(k.startswith(('simclr_head', 'ema')) for k in keys)
  assert 'visual.proj' in keys and 'logit_scale' in keys


# ---------------------------------------------------------------------------------------------------------------
# A model's own config.json decides the activation: the HF importer checks it against --model.

_TINY_VIT = dict(type='vit', image_size=16, patch_size=8, width=32, layers=1, heads=2, stages=())
_TINY_TEXT = dict(vocab_size=49408, context_length=12, width=32, layers=1, heads=2)


@pytest.fixture
def tiny_presets(monkeypatch):
  """'ViT-T-8' (GELU) and 'ViT-T-8-quickgelu', registered as presets for the test only."""
  spec = dict(embed_dim=16, vision=dict(_TINY_VIT), text=dict(_TINY_TEXT))
  monkeypatch.setitem(models.PRESETS, 'ViT-T-8', spec)
  monkeypatch.setitem(models.PRESETS, 'ViT-T-8-quickgelu', dict(spec, act='quick_gelu'))
  return 'ViT-T-8'


def _hf_clip_folder(folder, transformers, torch):
  """A random transformers CLIPModel of the ViT-T-8 sizes saved with save_pretrained, its activation left at
  transformers' default (quick_gelu, as on every OpenAI CLIP of the hub)."""
  config = transformers.CLIPConfig(
      projection_dim=16,
      text_config=dict(hidden_size=32, intermediate_size=128, num_hidden_layers=1, num_attention_heads=2,
                       max_position_embeddings=12),
      vision_config=dict(hidden_size=32, intermediate_size=128, num_hidden_layers=1, num_attention_heads=2,
                         image_size=16, patch_size=8))
  torch.manual_seed(0)
  model = _randomize(transformers.CLIPModel(config))
  model.save_pretrained(str(folder))
  return model


@pytest.mark.slow
@pytest.mark.parametrize('input_is_folder', [True, False])
def test_hf_import_follows_the_models_config_json(input_is_folder, tiny_presets, tmp_path, capsys):
  torch = pytest.importorskip('torch', reason='torch is needed for the transformers parity test')
  transformers = pytest.importorskip('transformers', reason='transformers is needed for the HF import test')
  folder = tmp_path / 'hf_model'
  reference = _hf_clip_folder(folder, transformers, torch)
  source = str(folder if input_is_folder else folder / 'model.safetensors')

  # The GELU preset is refused: both activations are listed, the quickgelu preset is suggested, nothing is written.
  refused = str(tmp_path / 'refused')
  with pytest.raises(WeightsError) as error:
    import_weights('hf', 'ViT-T-8', source, refused)
  err = str(error.value)
  assert "act (vision_config.hidden_act): file 'quick_gelu', --model=ViT-T-8 'gelu'" in err
  assert "act (text_config.hidden_act): file 'quick_gelu', --model=ViT-T-8 'gelu'" in err
  assert '2 mismatches' in err and 'Use --model=ViT-T-8-quickgelu' in err
  assert not os.path.exists(refused)

  ckpt = import_weights('hf', 'ViT-T-8-quickgelu', source, str(tmp_path / 'ckpt'))
  assert 'note:' not in capsys.readouterr().err  # the file was checked: nothing to warn about
  config = load_config(ckpt).model
  assert config.act == 'quick_gelu'
  images, _ = _inputs(16, seed=2)
  tokens = default_tokenizer()(CAPTIONS, context_length=12)
  attention = torch.ones(tokens.shape, dtype=torch.long)
  with torch.no_grad():
    out = reference(input_ids=torch.from_numpy(tokens).long(), attention_mask=attention,
                    pixel_values=torch.from_numpy(images.transpose(0, 3, 1, 2)))
  got_i, got_t = _our_embeddings(config, *load_variables(ckpt), images, tokens)
  np.testing.assert_allclose(got_i, out.image_embeds.numpy(), atol=PARITY_ATOL)
  np.testing.assert_allclose(got_t, out.text_embeds.numpy(), atol=PARITY_ATOL)


def test_hf_config_mismatches_are_all_listed(tiny_presets, tmp_path):
  folder = tmp_path / 'hf_model'
  folder.mkdir()
  hf = interchange.hf_config(models.preset('ViT-T-8'))
  hf['projection_dim'] = 24
  hf['vision_config'].update(num_hidden_layers=3, patch_size=4, image_size=32)
  hf['text_config'].update(hidden_size=48, num_attention_heads=4, max_position_embeddings=20, hidden_act='quick_gelu')
  (folder / 'config.json').write_text(json.dumps(hf))
  (folder / 'model.safetensors').write_bytes(b'')  # refused before the weights are read
  with pytest.raises(WeightsError) as error:
    import_weights('hf', 'ViT-T-8', str(folder), str(tmp_path / 'ckpt'))
  message = str(error.value)
  for field, got, want in [('embed_dim (projection_dim)', 24, 16),
                           ('vision.layers (vision_config.num_hidden_layers)', 3, 1),
                           ('vision.patch_size (vision_config.patch_size)', 4, 8),
                           ('vision.image_size (vision_config.image_size)', 32, 16),
                           ('text.width (text_config.hidden_size)', 48, 32),
                           ('text.heads (text_config.num_attention_heads)', 4, 2),
                           ('text.context_length (text_config.max_position_embeddings)', 20, 12),
                           ('act (text_config.hidden_act)', "'quick_gelu'", "'gelu'")]:
    assert f'{field}: file {got}, --model=ViT-T-8 {want}' in message, field
  assert '8 mismatches' in message and 'No preset matches the file' in message
  assert not os.path.exists(tmp_path / 'ckpt')


def test_hf_config_fields_left_out_take_transformers_defaults(tiny_presets):
  """save_pretrained may write only the values that differ from transformers' defaults; an OpenAI ViT-B/32 config
  reduced to those fits ViT-B-32-quickgelu and nothing else."""
  assert interchange.hf_matching_presets({'model_type': 'clip'}) == ['ViT-B-32-quickgelu']
  assert interchange.hf_matching_presets(interchange.hf_config(models.preset('ViT-T-8'))) == ['ViT-T-8']
  mismatches = interchange.hf_config_mismatches({'vision_config': {'patch_size': 16}}, models.preset('ViT-B-32'))
  assert [field for field, _, _ in mismatches] == ['act (vision_config.hidden_act)', 'act (text_config.hidden_act)',
                                                  'vision.patch_size (vision_config.patch_size)']
  early = {'text_config_dict': {'hidden_act': 'gelu'}, 'vision_config_dict': {'hidden_act': 'gelu'}}
  assert interchange.hf_matching_presets(early) == ['ViT-B-32']  # early transformers' keys


def test_hf_defaults_are_transformers_defaults():
  transformers = pytest.importorskip('transformers', reason='transformers is needed to read its defaults')
  assert transformers.CLIPConfig().projection_dim == interchange.HF_CLIP_DEFAULTS['projection_dim']
  for section, cls in (('text_config', transformers.CLIPTextConfig), ('vision_config', transformers.CLIPVisionConfig)):
    defaults = cls()
    for key, value in interchange.HF_CLIP_DEFAULTS[section].items():
      assert getattr(defaults, key) == value, f'{section}.{key}'


def test_hf_import_rejects_other_models_and_folders_without_weights(tmp_path):
  (tmp_path / 'config.json').write_text(json.dumps({'model_type': 'blip'}))
  (tmp_path / 'model.safetensors').write_bytes(b'')
  with pytest.raises(WeightsError, match="'blip' model"):
    import_weights('hf', 'ViT-B-32-quickgelu', str(tmp_path), str(tmp_path / 'ckpt'))
  # A SiglipModel (transformers' defaults: SigLIP B/16) is not read into a CLIP preset; the message names the
  # preset that fits.
  (tmp_path / 'config.json').write_text(json.dumps({'model_type': 'siglip'}))
  with pytest.raises(WeightsError, match='(?s)SiglipModel that does not match.*Use --model=ViT-B-16-SigLIP'):
    import_weights('hf', 'ViT-B-32-quickgelu', str(tmp_path), str(tmp_path / 'ckpt'))
  empty = tmp_path / 'empty'
  empty.mkdir()
  with pytest.raises(FileNotFoundError, match='without model.safetensors'):
    import_weights('hf', 'ViT-B-32-quickgelu', str(empty), str(tmp_path / 'ckpt'))


@pytest.mark.slow
def test_imports_without_a_config_say_which_activation_to_use(tiny_presets, tmp_path, capsys):
  config = models.preset('ViT-T-8')
  params, state = jax.jit(lambda rng: models.init_variables(models.build_model(config), rng))(jax.random.key(0))
  state_dict = interchange.variables_to_openai(jax.tree.map(np.asarray, params), state)
  from safetensors.numpy import save_file
  save_file(state_dict, str(tmp_path / 'open_clip.safetensors'))
  save_file(interchange.openai_to_hf(state_dict), str(tmp_path / 'hf.safetensors'))

  def notes(fmt, name, source, output):
    import_weights(fmt, name, str(tmp_path / source), str(tmp_path / output))
    return [line for line in capsys.readouterr().err.splitlines() if line.startswith('note:')]

  (note,) = notes('open_clip', 'ViT-T-8', 'open_clip.safetensors', 'a')
  assert 'OpenAI' in note and '--model=ViT-T-8-quickgelu' in note
  assert notes('open_clip', 'ViT-T-8-quickgelu', 'open_clip.safetensors', 'b') == []
  assert notes('openai', 'ViT-T-8', 'open_clip.safetensors', 'c') == []  # QuickGELU is set for OpenAI weights
  (note,) = notes('hf', 'ViT-T-8', 'hf.safetensors', 'd')
  assert 'no config.json' in note and 'quickgelu' in note


# ---------------------------------------------------------------------------------------------------------------
# Exports load in the target library's own loaders with nothing added by hand (issue 41, point 10).

# Captions on which transformers' CLIPTokenizer and ours must agree: accents, punctuation runs ('!' is id 0, our
# padding id), contractions, digits, whitespace runs, an empty caption, one cut at the context length.
EXPORT_CAPTIONS = ['a photo of a cat', 'Ünïcödé & <b>HTML</b> caption!!', '', 'a diagram ' * 40,
                   "it's  a\tdog's 3D model, 42 times!", 'wow! (really?) ... yes!!!', 'naïve café — déjà vu']


def _random_variables(config, seed=0):
  """(params, model_state) of `config`'s model as numpy arrays, drawn here rather than by the model's init (which
  compiles): LayerNorm and BatchNorm gains near 1, positive BatchNorm variances, everything else small noise."""
  rng = np.random.default_rng(seed)
  shapes = jax.eval_shape(lambda: models.init_variables(models.build_model(config), jax.random.key(0)))

  def draw(path, leaf):
    name = jax.tree_util.keystr(path)
    noise = rng.normal(size=leaf.shape).astype(np.float32)
    if name.endswith("['scale']"):
      return 1 + np.float32(0.1) * noise
    if name.endswith("['var']"):
      return 1 + np.float32(0.1) * np.abs(noise)
    return np.float32(0.02 if leaf.ndim else 1) * noise
  return tuple(jax.tree_util.tree_map_with_path(draw, tree) for tree in shapes)


def _clip_checkpoint(tmp_path, config, seed=3):
  """A checkpoint of `config`'s model with random weights: (path, params, model_state)."""
  params, state = _random_variables(config, seed)
  return save_checkpoint(str(tmp_path / 'ckpt'), params, state, _full_config(config)), params, state


def test_hf_tokenizer_files_give_our_ids(tmp_path):
  transformers = pytest.importorskip('transformers', reason='transformers is needed to read its tokenizer files')
  ours = default_tokenizer()
  for name, content in interchange.clip_tokenizer_files(*ours.vocabulary(), context_length=77).items():
    (tmp_path / name).write_text(content, encoding='utf-8')
  hf = transformers.CLIPTokenizer.from_pretrained(str(tmp_path))
  got = hf(EXPORT_CAPTIONS, padding='max_length', truncation=True, return_tensors='np')
  want = ours(EXPORT_CAPTIONS)
  # Every id up to the end of text is ours; transformers pads with the end-of-text id (masked out) where ours pads
  # with 0.
  np.testing.assert_array_equal(np.where(got['attention_mask'] == 1, got['input_ids'], 0), want)
  assert got['attention_mask'].sum(1).tolist() == [int(np.argmax(row)) + 1 for row in want]


@pytest.mark.slow
def test_hf_export_loads_with_clip_processor(tmp_path):
  torch = pytest.importorskip('torch', reason='torch is needed to run the exported transformers model')
  transformers = pytest.importorskip('transformers', reason='transformers is needed to load the export')
  config = _micro_config()
  ckpt, params, state = _clip_checkpoint(tmp_path, config)
  folder = export_weights('hf', ckpt, str(tmp_path / 'hf'))
  model = transformers.CLIPModel.from_pretrained(folder).eval()
  processor = transformers.CLIPProcessor.from_pretrained(folder)  # a local folder: nothing is downloaded
  rng = np.random.default_rng(0)
  images = [Image.fromarray(rng.integers(0, 256, size=shape, dtype=np.uint8))  # tall, wide, square, odd crops
            for shape in [(50, 37, 3), (21, 64, 3), (16, 16, 3), (100, 33, 3)]]
  inputs = processor(text=EXPORT_CAPTIONS, images=images, padding='max_length', truncation=True,
                     return_tensors='pt')
  pixels = np.stack([preprocess_image(image, 16) for image in images])
  np.testing.assert_allclose(inputs['pixel_values'].numpy().transpose(0, 2, 3, 1), pixels, atol=1e-5)
  tokens = default_tokenizer()(EXPORT_CAPTIONS, context_length=12)
  mask = inputs['attention_mask'].numpy()
  np.testing.assert_array_equal(np.where(mask == 1, inputs['input_ids'].numpy(), 0), tokens)
  with torch.no_grad():
    out = model(**inputs)
  want_i, want_t = _our_embeddings(config, params, state, pixels, tokens)
  np.testing.assert_allclose(out.image_embeds.numpy(), want_i, atol=1e-5)
  np.testing.assert_allclose(out.text_embeds.numpy(), want_t, atol=1e-5)


_OPEN_CLIP_LOADER = '''
import json, sys
import numpy as np
import support
support.use_placeholder_torchvision()  # open_clip imports torchvision's transforms, which create_model never calls
import open_clip, torch
out = {}
for name, (config, weights, inputs) in json.loads(sys.argv[1]).items():
  open_clip.add_model_config(config)
  model = open_clip.create_model(name, pretrained=weights).eval()  # loads strictly
  inputs = np.load(inputs)
  with torch.no_grad():
    out[name + '_image'] = model.encode_image(torch.from_numpy(inputs['images'].transpose(0, 3, 1, 2)),
                                              normalize=True).numpy()
    out[name + '_text'] = model.encode_text(torch.from_numpy(inputs['tokens']).long(), normalize=True).numpy()
np.savez(sys.argv[2], **out)
'''


@pytest.mark.slow
def test_open_clip_export_of_any_shape_loads_with_open_clip(tmp_path):
  """Shapes open_clip has no named config for (a ViT with 16 px images and heads of 8; a ResNet of 32 px images),
  built and loaded by open_clip's own factory from the exported config, in a process of its own."""
  pytest.importorskip('torch', reason='torch is needed to run open_clip')
  if importlib.util.find_spec('open_clip') is None:
    pytest.skip('open_clip_torch is not installed')
  vit = _micro_config()
  resnet = models.preset('RN50', embed_dim=16, act='quick_gelu')
  resnet.vision.update(image_size=32, width=8, heads=4, stages=(1, 1, 1, 1))
  resnet.text.update(context_length=12, width=16, layers=1, heads=2)
  rng = np.random.default_rng(0)
  tokens = default_tokenizer()(CAPTIONS, context_length=12)
  exports, want = {}, {}
  for name, config in (('micro-vit', vit), ('micro-rn', resnet)):
    (tmp_path / name).mkdir()
    ckpt, params, state = _clip_checkpoint(tmp_path / name, config)
    weights = export_weights('open_clip', ckpt, str(tmp_path / f'{name}.safetensors'))
    images = rng.normal(size=(2, config.vision.image_size, config.vision.image_size, 3)).astype(np.float32)
    np.savez(tmp_path / f'{name}-in.npz', images=images, tokens=tokens)
    exports[name] = (str(tmp_path / f'{name}.json'), weights, str(tmp_path / f'{name}-in.npz'))
    want[name] = _our_embeddings(config, params, state, images, tokens)
  result = subprocess.run(
      [sys.executable, '-c', _OPEN_CLIP_LOADER, json.dumps(exports), str(tmp_path / 'out.npz')],
      cwd=os.path.join(ROOT, 'tests'), env={**os.environ, 'PYTHONPATH': f'{ROOT}:{os.path.join(ROOT, "tests")}'},
      capture_output=True, text=True, timeout=300)
  assert result.returncode == 0, result.stderr[-3000:]
  got = np.load(tmp_path / 'out.npz')
  for name in exports:
    np.testing.assert_allclose(got[f'{name}_image'], want[name][0], atol=1e-5, err_msg=name)
    np.testing.assert_allclose(got[f'{name}_text'], want[name][1], atol=1e-5, err_msg=name)


def test_exported_files_respect_the_umask(tmp_path):
  config = _micro_config()
  ckpt, _, _ = _clip_checkpoint(tmp_path, config)
  old = os.umask(0o022)
  try:
    weights = export_weights('open_clip', ckpt, str(tmp_path / 'oc.safetensors'))
    folder = export_weights('hf', ckpt, str(tmp_path / 'hf'))
  finally:
    os.umask(old)
  modes = {path: os.stat(path).st_mode & 0o777 for path in
           [weights, str(tmp_path / 'oc.json'), folder, *(os.path.join(folder, f) for f in os.listdir(folder))]}
  assert modes == {path: 0o755 if os.path.isdir(path) else 0o644 for path in modes}
  assert {'vocab.json', 'merges.txt', 'tokenizer_config.json', 'special_tokens_map.json',
          'preprocessor_config.json'} <= set(os.listdir(folder))
  assert sorted(os.listdir(tmp_path)) == ['ckpt', 'hf', 'oc.json', 'oc.safetensors']  # no temporary files left


def test_siglip_hf_export_carries_its_sentencepiece_tokenizer(tmp_path, capsys):
  transformers = pytest.importorskip('transformers', reason='transformers is needed to load the export')
  sentencepiece = pytest.importorskip('sentencepiece', reason='sentencepiece is needed to train a tokenizer')
  rng = np.random.default_rng(0)
  words = 'a an the of photo drawing red green blue circle square on in with'.split()
  sentencepiece.SentencePieceTrainer.train(
      sentence_iterator=iter(' '.join(rng.choice(words, size=rng.integers(3, 10))) for _ in range(500)),
      model_prefix=str(tmp_path / 'spiece'), vocab_size=32, model_type='unigram', pad_id=0, eos_id=1, unk_id=2,
      bos_id=-1, num_threads=1, minloglevel=2)
  config = models.preset('ViT-B-16-SigLIP', embed_dim=32)
  config.vision.update(image_size=16, patch_size=4, width=32, layers=1, heads=2)
  config.text.update(context_length=16, width=32, layers=1, heads=2, vocab_size=32,
                     tokenizer_path=str(tmp_path / 'spiece.model'))
  ckpt, _, _ = _clip_checkpoint(tmp_path, config)
  processor = transformers.SiglipProcessor.from_pretrained(export_weights('hf', ckpt, str(tmp_path / 'hf')))
  captions = ['a red circle', "The photo's  drawing, of a Blue square!", '', 'red ' * 30, 'zebra xylophone']
  got = processor(text=captions, padding='max_length', truncation=True, return_tensors='np')['input_ids']
  np.testing.assert_array_equal(got, SentencePieceTokenizer(tmp_path / 'spiece.model', 16)(captions))
  image = Image.fromarray(rng.integers(0, 256, size=(50, 37, 3), dtype=np.uint8))
  pixels = processor(images=image, return_tensors='np')['pixel_values'][0].transpose(1, 2, 0)
  # SigLIP's own preprocessing (a square resize to [-1, 1]), as the checkpoint's config says, not OpenAI CLIP's
  np.testing.assert_allclose(pixels, vlp_jax.load(ckpt).preprocess(image), atol=1e-5)
  np.testing.assert_allclose(pixels, preprocess_image(image, 16, image_ops.SIGLIP_PREPROCESSING), atol=1e-5)
  # Without the SentencePiece file on this machine, the export says which files are missing and why.
  config.text.tokenizer_path = str(tmp_path / 'gone' / 'spiece.model')
  ckpt = save_checkpoint(str(tmp_path / 'ckpt2'), *_random_variables(config), _full_config(config))
  capsys.readouterr()
  export_weights('hf', ckpt, str(tmp_path / 'hf2'))
  note = capsys.readouterr().err
  assert 'has no tokenizer files (spiece.model, tokenizer_config.json' in note and 'gone/spiece.model' in note
  assert 'preprocessor_config.json' in os.listdir(tmp_path / 'hf2')
