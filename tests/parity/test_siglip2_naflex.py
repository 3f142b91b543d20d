"""SigLIP 2 NaFlex: a randomly initialised transformers Siglip2Model with its own processor (Siglip2ImageProcessor,
PIL backend, and a Gemma tokenizer), imported by `interchange.import_weights` as a siglip_vit model with
`vision.naflex`; images of five aspect ratios at two patch budgets (one below the 4 x 4 position grid's 16 patches,
one above) and captions embed as transformers embeds them, through the tower and through `vlp_jax.load(...)
.encode_image`; the export loads in transformers' Siglip2Model and Siglip2Processor and gives back every tensor."""
import json

import numpy as np
import pytest

import vlp_jax
from vlp_jax import models
from vlp_jax.checkpoint_files import load_variables
from vlp_jax.data.image import image_ops
from vlp_jax.data.image.naflex_patches import naflex_patches
from vlp_jax.interchange import export_weights, import_weights
from vlp_jax.models import interchange
from vlp_jax.models.naflex_inputs import NaflexImages
from vlp_jax.training.checkpoint import load_config

from support import randomize_torch_weights
from test_siglip import _SIGLIP2_TEXT, _SIGLIP2_TOKENIZER_CONFIG, _gemma_tokenizer_model

PARITY_ATOL = 1e-4
PATCH = 4
_VISION = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=8, num_patches=16,
               patch_size=PATCH)
# Height x width: 1:1, 1:4, 4:1, 3:2 and an odd one.
_SIZES = [(32, 32), (12, 48), (60, 15), (24, 36), (19, 41)]
BUDGETS = (9, 40)


def _reference(transformers, torch, seed=0):
  """A Siglip2Model with non-trivial random weights (LayerNorm gains near 1, the rest small noise)."""
  config = transformers.Siglip2Config(text_config=_SIGLIP2_TEXT, vision_config=_VISION)
  torch.manual_seed(seed)
  model = transformers.Siglip2Model(config).eval()
  return randomize_torch_weights(torch, model, seed, raw=('logit_scale', 'logit_bias'))


def _images():
  rng = np.random.default_rng(0)
  return [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for h, w in _SIZES]


def _reference_embeddings(model, torch, processor, images, tokens, budget):
  inputs = processor(images=images, max_num_patches=budget, return_tensors='pt')
  with torch.no_grad():
    out = model(input_ids=torch.from_numpy(tokens).long(), pixel_values=inputs['pixel_values'],
                pixel_attention_mask=inputs['pixel_attention_mask'], spatial_shapes=inputs['spatial_shapes'])
  return out.image_embeds.numpy(), out.text_embeds.numpy(), inputs['spatial_shapes'].numpy()


def _normalised(x):
  x = np.asarray(x)
  return x / np.linalg.norm(x, axis=-1, keepdims=True)


@pytest.mark.slow
def test_hf_siglip2_naflex_import_parity_load_and_export(tmp_path):
  torch = pytest.importorskip('torch', reason='torch is needed for the SigLIP 2 NaFlex parity test')
  transformers = pytest.importorskip('transformers', reason='transformers is the reference')
  reference = _reference(transformers, torch)
  folder = tmp_path / 'hf'
  reference.save_pretrained(str(folder))
  _gemma_tokenizer_model(folder)
  (folder / 'tokenizer_config.json').write_text(json.dumps(_SIGLIP2_TOKENIZER_CONFIG))
  processor = transformers.Siglip2ImageProcessorPil(patch_size=PATCH, max_num_patches=BUDGETS[0])
  processor.save_pretrained(str(folder))

  ckpt = import_weights('hf', None, str(folder), str(tmp_path / 'ckpt'))
  config = load_config(ckpt).model
  assert (config.name, config.vision.type, config.vision.naflex, config.vision.max_patches) == (
      'hf-siglip2-naflex', 'siglip_vit', True, BUDGETS[0])
  assert (config.vision.image_size, config.vision.patch_size, config.text.tokenizer) == (16, PATCH, 'gemma')
  preprocessing = image_ops.preprocessing_of(config)
  assert preprocessing.resample == 'bilinear'
  params, model_state = load_variables(ckpt)
  model = models.build_model(config)
  variables = {'params': params, **model_state}
  loaded = vlp_jax.load(ckpt, batch_size=8)

  images = _images()
  tokens = np.random.default_rng(1).integers(0, 330, size=(3, 64)).astype(np.int32)
  for budget in BUDGETS:
    want_i, want_t, shapes = _reference_embeddings(reference, torch, processor, images, tokens, budget)
    assert any(r * c > 16 for r, c in shapes) == (budget > 16)  # the position grid is enlarged, or shrunk
    # The tower on NaflexImages made by our host preprocessing.
    pairs = [naflex_patches(image, PATCH, budget, preprocessing) for image in images]
    naflex = NaflexImages(np.stack([p for p, _ in pairs]), np.stack([s for _, s in pairs]))
    np.testing.assert_array_equal(naflex.spatial_shapes, shapes)
    got_i = _normalised(model.apply(variables, naflex, method=model.encode_image)['embed'])
    err_i = np.abs(got_i - want_i).max()
    print(f'SigLIP 2 NaFlex, budget {budget}: max abs error image {err_i:.2e}')
    assert err_i < PARITY_ATOL
    # vlp_jax.load(...).encode_image: uint8 images of differing sizes in one call.
    np.testing.assert_allclose(loaded.encode_image(images, max_patches=budget), got_i, atol=1e-5)
  np.testing.assert_allclose(loaded.encode_image(images), loaded.encode_image(images, max_patches=BUDGETS[0]))
  got_t = _normalised(model.apply(variables, tokens, method=model.encode_text)['embed'])
  assert np.abs(got_t - want_t).max() < PARITY_ATOL

  out = export_weights('hf', ckpt, str(tmp_path / 'export'))
  exported = transformers.Siglip2Model.from_pretrained(out).eval()
  want_state = reference.state_dict()
  assert sorted(exported.state_dict()) == sorted(want_state)
  for key, value in exported.state_dict().items():
    np.testing.assert_array_equal(value.numpy(), want_state[key].numpy(), err_msg=key)
  # The image processor reads the budget and patch size from the file; Siglip2Processor's own defaults (256, 16)
  # override its image processor's unless the call names them (transformers' kwargs priority).
  theirs = processor(images=images, return_tensors='np')
  for ours in (transformers.AutoImageProcessor.from_pretrained(out)(images=images, return_tensors='np'),
               transformers.Siglip2Processor.from_pretrained(out)(images=images, max_num_patches=BUDGETS[0],
                                                                  patch_size=PATCH, return_tensors='np')):
    np.testing.assert_array_equal(ours['spatial_shapes'], theirs['spatial_shapes'])
    np.testing.assert_allclose(ours['pixel_values'], theirs['pixel_values'], atol=1e-6)
  # Re-imported, the export is the same model (the config.json a Siglip2Model writes describes it).
  again = load_config(import_weights('hf', None, out, str(tmp_path / 'again'))).model
  assert again.vision.to_dict() == config.vision.to_dict() and again.preprocess.to_dict() == config.preprocess.to_dict()


def test_siglip2_config_json_round_trip():
  # google/siglip2-base-patch16-naflex's config.json sets about these; the rest are Siglip2Config's defaults.
  released = {'architectures': ['Siglip2Model'], 'model_type': 'siglip2',
              'text_config': {'model_type': 'siglip2_text_model', 'projection_size': 768, 'vocab_size': 256_000},
              'vision_config': {'model_type': 'siglip2_vision_model', 'num_patches': 256, 'patch_size': 16}}
  config = interchange.siglip2_model_config(released, _SIGLIP2_TOKENIZER_CONFIG, max_patches=576)
  assert (config.vision.naflex, config.vision.max_patches, config.vision.image_size) == (True, 576, 256)
  assert (config.name, config.text.tokenizer, image_ops.preprocessing_of(config).resample) == (
      'hf-siglip2-naflex', 'gemma', 'bilinear')
  written = interchange.hf_siglip2_config(config)
  assert written['vision_config']['num_patches'] == 256 and 'image_size' not in written['vision_config']
  assert not interchange.siglip_mismatches(interchange.siglip2_model_config(written, _SIGLIP2_TOKENIZER_CONFIG), config)
  with pytest.raises(interchange.WeightsError, match=r'vision_config\.num_patches=200 is not a square'):
    interchange.siglip2_model_config({**released, 'vision_config': {'num_patches': 200}})
