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

import vlp_jax
from vlp_jax import models
from vlp_jax.checkpoint_files import load_variables
from vlp_jax.data.text.tokenizer_factory import tokenizer_for
from vlp_jax.interchange import export_weights, import_weights
from vlp_jax.models import interchange
from vlp_jax.training.checkpoint import load_config

from support import import_open_clip_module, randomize_torch_weights

PARITY_ATOL = 1e-4

# Small, with every option a SigLIP checkpoint can set away from the defaults: an MLP width that is not 4x (So400m's
# case), a patch size that does not divide the image (So400m at 384 px), different towers' depths and heads.
_TEXT = dict(vocab_size=300, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
             max_position_embeddings=16)
_VISION = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=8, image_size=30,
               patch_size=7)


def _reference(transformers, torch, seed=0, text=None):
  """A transformers SiglipModel with non-trivial random weights (LayerNorm gains near 1, the rest small noise)."""
  config = transformers.SiglipConfig(text_config=text or _TEXT, vision_config=_VISION)
  torch.manual_seed(seed)
  model = transformers.SiglipModel(config).eval()
  return randomize_torch_weights(torch, model, seed, raw=('logit_scale', 'logit_bias'))


def _inputs(seed=0, text=None):
  text = text or _TEXT
  rng = np.random.default_rng(seed)
  images = rng.normal(size=(3, 30, 30, 3)).astype(np.float32)
  tokens = rng.integers(0, text['vocab_size'], size=(3, text['max_position_embeddings'])).astype(np.int32)
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


def _assert_parity(reference, torch, ckpt, name, text=None):
  """Our embeddings and logits of the imported `ckpt` equal transformers' `reference` model's; returns our config."""
  images, tokens = _inputs(text=text)
  want_i, want_t, want_logits = _reference_outputs(reference, torch, images, tokens)
  got_i, got_t, got_logits, config = _ours(ckpt, images, tokens)
  err_i, err_t = np.abs(got_i - want_i).max(), np.abs(got_t - want_t).max()
  print(f'{name} (transformers): max abs error image {err_i:.2e}, text {err_t:.2e}')
  assert err_i < PARITY_ATOL and err_t < PARITY_ATOL
  np.testing.assert_allclose(got_logits, want_logits, atol=1e-3)  # the learned scale and bias came along
  return config


def _assert_exact_export(reference, transformers, ckpt, output):
  """Export of `ckpt` gives back every tensor of `reference` exactly, as transformers reads it; returns the folder."""
  out = export_weights('hf', ckpt, output)
  loaded = transformers.SiglipModel.from_pretrained(out).eval()
  want_state = reference.state_dict()
  assert sorted(loaded.state_dict()) == sorted(want_state)
  for key, value in loaded.state_dict().items():
    np.testing.assert_array_equal(value.numpy(), want_state[key].numpy(), err_msg=key)
  return out


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
  config = _assert_parity(reference, torch, ckpt, 'SigLIP')
  assert config.vision.type == 'siglip_vit' and config.vision.mlp_width == 96 and config.name == 'hf-siglip'
  assert config.text.tokenizer == 'sentencepiece'
  assert config.text.tokenizer_path == os.path.join(os.path.abspath(folder), 'spiece.model')
  # Export gives back every tensor exactly, and transformers reads the folder as the same model.
  out = _assert_exact_export(reference, transformers, ckpt, str(tmp_path / 'export'))
  with open(os.path.join(out, 'config.json')) as f:
    assert not interchange.siglip_mismatches(interchange.siglip_model_config(json.load(f)), config)


@pytest.mark.slow
def test_hf_siglip2_import_parity_tokenizer_and_export_round_trip(tmp_path):
  torch = pytest.importorskip('torch', reason='torch is needed for the SigLIP 2 parity test')
  transformers = pytest.importorskip('transformers', reason='transformers is needed for the SigLIP 2 parity test')
  reference = _reference(transformers, torch, text=_SIGLIP2_TEXT)
  folder = tmp_path / 'hf'
  reference.save_pretrained(str(folder))  # a released SigLIP 2 folder: weights, config.json, Gemma's tokenizer
  _gemma_tokenizer_model(folder)
  (folder / 'tokenizer_config.json').write_text(json.dumps(_SIGLIP2_TOKENIZER_CONFIG))
  ckpt = import_weights('hf', None, str(folder), str(tmp_path / 'ckpt'))
  config = _assert_parity(reference, torch, ckpt, 'SigLIP 2', text=_SIGLIP2_TEXT)
  # What the text tower needs of its tokenizer is in the checkpoint's config, so captions tokenise as transformers'
  # tokenizer of the released folder does them.
  assert (config.name, config.text.tokenizer, config.text.context_length, config.text.vocab_size) == (
      'hf-siglip2', 'gemma', 64, 256_000)
  assert config.text.tokenizer_path == os.path.join(str(folder), 'tokenizer.model')
  np.testing.assert_array_equal(vlp_jax.load(ckpt).tokenize(_CAPTIONS),
                                _gemma_reference_ids(transformers, folder, _CAPTIONS, 64))
  # Export gives back every tensor exactly, and a tokenizer transformers reads as the released one.
  out = _assert_exact_export(reference, transformers, ckpt, str(tmp_path / 'export'))
  exported_ids = transformers.AutoTokenizer.from_pretrained(out)([c.lower() for c in _CAPTIONS], padding='max_length',
                                                                 truncation=True, max_length=64)['input_ids']
  np.testing.assert_array_equal(exported_ids, _gemma_reference_ids(transformers, folder, _CAPTIONS, 64))


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


# SigLIP 2 (fixed resolution): a SiglipModel whose text tower reads Gemma's 256k ids, 64 of them; narrow and shallow
# here, with the vocabulary and context length of the released checkpoints.
_SIGLIP2_TEXT = dict(_TEXT, vocab_size=256_000, max_position_embeddings=64)
# Gemma's special ids; a released SigLIP 2 folder's tokenizer_config.json (transformers' GemmaTokenizer, no BOS,
# sticky EOS, right padding with '<pad>').
_GEMMA_PAD, _GEMMA_EOS, _GEMMA_BOS, _GEMMA_UNK = 0, 1, 2, 3
_SIGLIP2_TOKENIZER_CONFIG = {'tokenizer_class': 'GemmaTokenizer', 'add_bos_token': False, 'add_eos_token': True,
                             'padding_side': 'right', 'model_max_length': 64, 'pad_token': '<pad>',
                             'eos_token': '<eos>', 'bos_token': '<bos>', 'unk_token': '<unk>'}
_CAPTIONS = ['A photo of a Cat  on the  Beach, 42 zebras!', ' leading space', 'ÉCOLE Ünïcode 数字', '',
             'tab\there\nnew line', 'x ' * 40, 'unseen: 🐱 Straße']  # the last needs byte fallback


def _gemma_tokenizer_model(folder) -> str:
  """A tiny BPE `tokenizer.model` laid out as Gemma's ('<pad>' 0, '<eos>' 1, '<bos>' 2, '<unk>' 3, byte fallback,
  no dummy prefix, spaces kept), trained here in a few ms."""
  sentencepiece = pytest.importorskip('sentencepiece')
  sentences = [c.lower() for c in _CAPTIONS[:3]] * 20 + ['the quick brown fox jumps over the lazy dog'] * 20
  path = os.path.join(str(folder), 'tokenizer.model')
  with open(path, 'wb') as f:
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(sentences), model_writer=f, vocab_size=330, model_type='bpe',
        pad_id=_GEMMA_PAD, eos_id=_GEMMA_EOS, bos_id=_GEMMA_BOS, unk_id=_GEMMA_UNK, pad_piece='<pad>',
        eos_piece='<eos>', bos_piece='<bos>', unk_piece='<unk>', byte_fallback=True, add_dummy_prefix=False,
        remove_extra_whitespaces=False, normalization_rule_name='identity', character_coverage=1.0,
        num_threads=1, minloglevel=2)
  return path


def _gemma_reference_ids(transformers, folder, captions, context_length, siglip2_class=False) -> np.ndarray:
  """[N, L] ids of transformers' tokenizer for the folder's tokenizer.model as SigLIP 2's processor asks them:
  GemmaTokenizer on lowercased captions (the model card's advice), or Siglip2Tokenizer, which lowercases itself."""
  cls = transformers.models.siglip2.Siglip2Tokenizer if siglip2_class else transformers.GemmaTokenizer
  reference = cls.from_pretrained(str(folder), add_bos_token=False, add_eos_token=True, padding_side='right')
  texts = captions if siglip2_class else [c.lower() for c in captions]
  out = reference(texts, padding='max_length', truncation=True, max_length=context_length)
  return np.asarray(out['input_ids'], np.int32)


def test_siglip2_config_json_records_the_gemma_tokenizer():
  # google/siglip2-base-patch16-224's config.json sets only these; the rest are SiglipConfig's defaults.
  released = {'architectures': ['SiglipModel'], 'model_type': 'siglip',
              'text_config': {'model_type': 'siglip_text_model', 'projection_size': 768, 'vocab_size': 256_000},
              'vision_config': {'model_type': 'siglip_vision_model'}}
  for tokenizer_config in (_SIGLIP2_TOKENIZER_CONFIG, None):  # without one, the vocabulary's size decides
    config = interchange.siglip_model_config(released, tokenizer_config)
    # the SigLIP 2 preset of its shapes, named as open_clip names the same weights
    assert config.text.tokenizer == 'gemma' and config.name == 'ViT-B-16-SigLIP2'
    assert (config.text.context_length, config.text.vocab_size, config.vision.image_size) == (64, 256_000, 224)
    mismatches = interchange.siglip_mismatches(config, models.preset('ViT-B-16-SigLIP'))
    assert mismatches == [('text.vocab_size', 256_000, 32_000), ('text.tokenizer', 'gemma', 'sentencepiece')]
  siglip = interchange.hf_siglip_config(models.preset('ViT-B-16-SigLIP'))
  assert interchange.siglip_model_config(siglip, {'tokenizer_class': 'SiglipTokenizer'}).text.tokenizer == (
      'sentencepiece')
  assert interchange.siglip_tokenizer(siglip, {'tokenizer_class': 'Siglip2Tokenizer'}) == 'gemma'


@pytest.mark.parametrize('context_length', [64, 8])
def test_gemma_tokenizer_ids_equal_transformers(tmp_path, context_length):
  transformers = pytest.importorskip('transformers', reason='transformers is the reference tokenizer')
  _gemma_tokenizer_model(tmp_path)
  ours = tokenizer_for({'tokenizer': 'gemma', 'tokenizer_path': str(tmp_path / 'tokenizer.model')})
  got = ours(_CAPTIONS, context_length=context_length)
  assert (ours.eot_token, ours.pad_token) == (_GEMMA_EOS, _GEMMA_PAD)
  for siglip2_class in (False, True):
    np.testing.assert_array_equal(
        got, _gemma_reference_ids(transformers, tmp_path, _CAPTIONS, context_length, siglip2_class))


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
  return randomize_torch_weights(torch, model)


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
