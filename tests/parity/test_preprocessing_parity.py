"""End to end preprocessing parity for every importable family (issue 61, check b): a randomly initialised reference
model run on what its own library's processor makes of non-square, odd-sized PIL images, against
`vlp_jax.load(imported).encode_image` of the same PIL images; then the export's preprocessor_config.json, read back by
transformers, gives our pixels. Families: transformers CLIP, transformers SigLIP, SigLIP 2 (a SiglipModel with
Gemma's tokenizer and SigLIP 2's bilinear processor), open_clip CLIP and OpenAI CLIP (open_clip's model with OpenAI's
file layout). Tiny random models; skipped without torch and transformers."""
import json
import os

import numpy as np
from PIL import Image
import pytest

import vlp_jax
from vlp_jax import models
from vlp_jax.cli import embed_command
from vlp_jax.data.image import image_ops
from vlp_jax.interchange import export_weights, import_weights
from vlp_jax.models import interchange
from vlp_jax.training.checkpoint import load_config

from support import import_open_clip_module, randomize_torch_weights

PARITY_ATOL = 1e-4
# Tall, wide, odd-sized and square: at 16 px, 37x91 leaves an odd crop margin (23) and 200x61 an even one (36).
IMAGE_SHAPES = [(37, 91), (200, 61), (45, 20), (16, 16)]
_OPENAI_MEAN, _OPENAI_STD = (0.48145466, 0.4578275, 0.40821073), (0.26862954, 0.26130258, 0.27577711)


def _images(seed=0):
  rng = np.random.default_rng(seed)
  return [Image.fromarray(rng.integers(0, 256, size=(h, w, 3), dtype=np.uint8)) for h, w in IMAGE_SHAPES]


def _sentencepiece_model(path, gemma=False):
  """A tiny SentencePiece model at `path` (ids < 100; with `gemma`, Gemma's special pieces and ids): vlp_jax.load
  builds the model's tokenizer, which the image parity does not use."""
  sentencepiece = pytest.importorskip('sentencepiece')
  specials = dict(pad_id=0, eos_id=1, bos_id=2, unk_id=3, pad_piece='<pad>', eos_piece='<eos>', bos_piece='<bos>',
                  unk_piece='<unk>') if gemma else {}
  with open(path, 'wb') as f:
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(['a photo of a cat', 'the quick brown fox jumps over the lazy dog'] * 20),
        model_writer=f, vocab_size=60, model_type='bpe', hard_vocab_limit=False, num_threads=1, minloglevel=2,
        **specials)


def _unit(x):
  x = np.asarray(x, np.float64)
  return x / np.linalg.norm(x, axis=-1, keepdims=True)


def _hf_image_embeds(torch, model, pixel_values, context_length):
  """transformers' image embeddings (normalised) of [N, 3, S, S] pixel values."""
  tokens = torch.ones((len(pixel_values), context_length), dtype=torch.long)
  with torch.no_grad():
    return _unit(model(input_ids=tokens, pixel_values=torch.as_tensor(pixel_values)).image_embeds.numpy())


def _pil_processor(transformers, kind):
  """transformers' PIL image processor class of `kind` ('CLIP' or 'Siglip'): the one whose resize is PIL's, as
  ours (transformers 5 picks a torchvision backend when torchvision is installed, with its own antialiasing)."""
  return getattr(transformers, f'{kind}ImageProcessorPil', None) or getattr(transformers, f'{kind}ImageProcessor')


def _assert_encode_image_parity(ckpt, want, name):
  got = vlp_jax.load(ckpt).encode_image(_images())
  error = np.abs(got - want).max()
  print(f'{name}: encode_image max abs error {error:.2e}')
  assert error < PARITY_ATOL, f'{name}: {error}'


def _assert_export_reproduces_pixels(transformers, ckpt, tmp_path, kind, shapes=None):
  """The hf export's processor config, read by transformers, gives our model input for the images at `shapes`
  (default: all)."""
  folder = export_weights('hf', ckpt, str(tmp_path / 'export'))
  processor = _pil_processor(transformers, kind).from_pretrained(folder)
  loaded = vlp_jax.load(ckpt)
  images = [image for image, shape in zip(_images(), IMAGE_SHAPES) if shapes is None or shape in shapes]
  theirs = processor(images=images, return_tensors='np')['pixel_values'].transpose(0, 2, 3, 1)
  np.testing.assert_allclose(theirs, np.stack([loaded.preprocess(image) for image in images]), atol=1e-5)
  return folder


# -------------------------------------------------------------------------------------------------- transformers


_SIGLIP_TEXT = dict(vocab_size=300, hidden_size=64, intermediate_size=96, num_hidden_layers=1, num_attention_heads=4,
                    max_position_embeddings=16)
_SIGLIP_VISION = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4, image_size=16,
                      patch_size=8)
# SigLIP's processor (as google/siglip-*: bicubic) and SigLIP 2's (as google/siglip2-* at a fixed resolution:
# bilinear), both a square resize to [-1, 1].
_SIGLIP_FAMILIES = {'SigLIP': 3, 'SigLIP 2': 2}


@pytest.mark.slow
@pytest.mark.parametrize('family', sorted(_SIGLIP_FAMILIES))
def test_transformers_siglip_sees_the_pixels_of_its_own_processor(family, tmp_path):
  torch = pytest.importorskip('torch', reason='torch is needed for the SigLIP parity test')
  transformers = pytest.importorskip('transformers', reason='transformers is needed for the SigLIP parity test')
  torch.manual_seed(0)
  reference = randomize_torch_weights(torch, transformers.SiglipModel(transformers.SiglipConfig(
      text_config=_SIGLIP_TEXT, vision_config=_SIGLIP_VISION)))
  folder = tmp_path / 'hf'
  reference.save_pretrained(str(folder))
  processor = _pil_processor(transformers, 'Siglip')(size={'height': 16, 'width': 16},
                                                     resample=_SIGLIP_FAMILIES[family])
  processor.save_pretrained(str(folder))
  if family == 'SigLIP 2':
    (folder / 'tokenizer_config.json').write_text(json.dumps({'tokenizer_class': 'GemmaTokenizer'}))
  _sentencepiece_model(folder / ('tokenizer.model' if family == 'SigLIP 2' else 'spiece.model'), family == 'SigLIP 2')
  want = _hf_image_embeds(torch, reference, processor(images=_images(), return_tensors='np')['pixel_values'], 16)
  ckpt = import_weights('hf', None, str(folder), str(tmp_path / 'ckpt'))
  preprocessing = image_ops.preprocessing_of(load_config(ckpt).model)
  assert (preprocessing.resize, preprocessing.mean) == ('squash', (0.5, 0.5, 0.5))
  _assert_encode_image_parity(ckpt, want, f'transformers {family}')
  # `python -m vlp_jax.embed --pixels` of the images as files, and the CLIP_benchmark loader's transform, too.
  for index, image in enumerate(_images()):
    image.save(tmp_path / f'{index}.png')
  files = sorted(str(path) for path in tmp_path.glob('*.png'))
  got = embed_command.run(ckpt, str(tmp_path / 'emb.npz'), pixels=str(tmp_path / '*.png'))['image_embeddings']
  assert np.abs(got - want[[int(os.path.basename(f)[:-4]) for f in files]]).max() < PARITY_ATOL
  clip_benchmark = pytest.importorskip('vlp_jax.cli.clip_benchmark_command')  # needs torch, as CLIP_benchmark
  _, transform, _ = clip_benchmark.load_vlp_jax('vlp_jax', ckpt)
  np.testing.assert_allclose(np.stack([transform(image).numpy() for image in _images()]),
                             processor(images=_images(), return_tensors='np')['pixel_values'], atol=1e-5)
  exported = _assert_export_reproduces_pixels(transformers, ckpt, tmp_path, 'Siglip')
  with open(f'{exported}/preprocessor_config.json') as f:
    assert json.load(f)['resample'] == _SIGLIP_FAMILIES[family]


@pytest.mark.slow
def test_transformers_clip_sees_the_pixels_of_its_own_processor(tmp_path, monkeypatch):
  torch = pytest.importorskip('torch', reason='torch is needed for the CLIP parity test')
  transformers = pytest.importorskip('transformers', reason='transformers is needed for the CLIP parity test')
  spec = dict(embed_dim=16, act='quick_gelu',
              vision=dict(type='vit', image_size=16, patch_size=8, width=32, layers=1, heads=2, stages=()),
              text=dict(vocab_size=49408, context_length=12, width=32, layers=1, heads=2))
  monkeypatch.setitem(models.PRESETS, 'ViT-T-8-quickgelu', spec)
  torch.manual_seed(0)
  reference = randomize_torch_weights(torch, transformers.CLIPModel(transformers.CLIPConfig.from_dict(
      interchange.hf_config(models.preset('ViT-T-8-quickgelu')))))
  folder = tmp_path / 'hf'
  reference.save_pretrained(str(folder))
  processor = _pil_processor(transformers, 'CLIP')(size={'shortest_edge': 16},
                                                    crop_size={'height': 16, 'width': 16})
  processor.save_pretrained(str(folder))
  want = _hf_image_embeds(torch, reference, processor(images=_images(), return_tensors='np')['pixel_values'], 12)
  ckpt = import_weights('hf', None, str(folder), str(tmp_path / 'ckpt'))
  _assert_encode_image_parity(ckpt, want, 'transformers CLIP')
  _assert_export_reproduces_pixels(transformers, ckpt, tmp_path, 'CLIP')


# ------------------------------------------------------------------------------------- open_clip and OpenAI CLIP


def _torchvision_clip_transform(image, size):
  """OpenAI CLIP's and open_clip's evaluation transform, torchvision's Resize(size, bicubic) + CenterCrop(size) +
  ToTensor + Normalize(OpenAI), written out from torchvision's definitions (the whole image resized, the longer
  side truncated; the crop starting at round((side - size) / 2), half to even) where torchvision is not
  installed -> [S, S, 3] float32."""
  width, height = image.size
  short = min(width, height)
  new_w, new_h = int(size * width / short), int(size * height / short)
  resized = np.asarray(image.convert('RGB').resize((new_w, new_h), Image.Resampling.BICUBIC), np.float32)
  top, left = int(round((new_h - size) / 2.0)), int(round((new_w - size) / 2.0))
  crop = resized[top:top + size, left:left + size] / 255.0
  return ((crop - np.array(_OPENAI_MEAN, np.float32)) / np.array(_OPENAI_STD, np.float32)).astype(np.float32)


def _open_clip_pixels(size):
  """[N, S, S, 3] float32: open_clip's own transform of the test images where torchvision is installed, else
  `_torchvision_clip_transform`."""
  try:
    import torchvision  # noqa: F401  # pylint: disable=g-import-not-at-top,unused-import
    transform = import_open_clip_module('transform').image_transform(size, is_train=False)
    return np.stack([transform(image).numpy().transpose(1, 2, 0) for image in _images()])
  except ImportError:
    return np.stack([_torchvision_clip_transform(image, size) for image in _images()])


@pytest.mark.slow
@pytest.mark.parametrize('fmt', ['open_clip', 'openai'])
def test_open_clip_and_openai_clip_see_the_pixels_of_their_own_transform(fmt, tmp_path, monkeypatch, capsys):
  oc_model = import_open_clip_module('model')  # first: skips the test without torch or open_clip
  import torch  # pylint: disable=g-import-not-at-top  # optional
  from safetensors.torch import save_file  # pylint: disable=g-import-not-at-top  # needs torch
  spec = dict(embed_dim=16, vision=dict(type='vit', image_size=16, patch_size=8, width=32, layers=1, heads=2,
                                        stages=()),
              text=dict(vocab_size=49408, context_length=12, width=32, layers=1, heads=2))
  monkeypatch.setitem(models.PRESETS, 'ViT-T-8', spec)
  quick_gelu = fmt == 'openai'  # OpenAI's towers use QuickGELU
  torch.manual_seed(0)
  reference = randomize_torch_weights(torch, oc_model.CLIP(
      16, oc_model.CLIPVisionCfg(image_size=16, patch_size=8, width=32, layers=1, head_width=16),
      oc_model.CLIPTextCfg(context_length=12, vocab_size=49408, width=32, heads=2, layers=1), quick_gelu=quick_gelu))
  with torch.no_grad():
    want = _unit(reference.encode_image(torch.from_numpy(_open_clip_pixels(16).transpose(0, 3, 1, 2))).numpy())
  state_dict = {k: v.contiguous() for k, v in reference.state_dict().items()}
  source = str(tmp_path / ('openai.pt' if fmt == 'openai' else 'open_clip.safetensors'))
  (torch.save if fmt == 'openai' else save_file)(state_dict, source)
  ckpt = import_weights(fmt, 'ViT-T-8', source, str(tmp_path / 'ckpt'))
  assert image_ops.preprocessing_of(load_config(ckpt).model) == image_ops.TORCHVISION_CLIP_PREPROCESSING
  _assert_encode_image_parity(ckpt, want, f'{fmt} CLIP')
  # transformers' processors crop an odd margin half a pixel earlier: the export reproduces the other images, and
  # says so.
  transformers = pytest.importorskip('transformers', reason='transformers is needed to read the export')
  capsys.readouterr()
  _assert_export_reproduces_pixels(transformers, ckpt, tmp_path, 'CLIP', shapes=[(200, 61), (45, 20), (16, 16)])
  assert 'one pixel' in capsys.readouterr().err


# ------------------------------------------------------------------------------------------------ quick, no torch


def test_preprocessor_config_round_trips_every_family():
  for name in ('ViT-B-32', 'ViT-B-16-SigLIP-256'):
    config = models.preset(name)
    processor = interchange.preprocessor_config(config)
    got = interchange.preprocessing_from_hf(processor, 'preprocessor_config.json', config.vision.image_size,
                                            image_ops.OPENAI_CLIP_PREPROCESSING)
    assert got == image_ops.preprocessing_of(config), name
  siglip = interchange.preprocessor_config(models.preset('ViT-B-16-SigLIP'))
  assert siglip['size'] == {'height': 224, 'width': 224} and not siglip['do_center_crop']
  assert siglip['image_mean'] == [0.5, 0.5, 0.5] and siglip['image_processor_type'] == 'SiglipImageProcessor'


def test_hf_processor_configs_vlp_jax_cannot_follow_are_refused_by_name():
  default = image_ops.SIGLIP_PREPROCESSING
  with pytest.raises(interchange.WeightsError, match=r'resample=5 is not valid; valid choices: \[2, 3\]'):
    interchange.preprocessing_from_hf({'resample': 5}, 'p.json', 224, default)
  for unsupported in ({'size': {'shortest_edge': 224}, 'do_center_crop': False},  # non-square inputs
                      {'size': {'shortest_edge': 256}, 'crop_size': {'height': 224, 'width': 224}},  # resize, crop
                      {'size': {'height': 256, 'width': 256}}):  # another resolution than the model's
    with pytest.raises(interchange.WeightsError, match=r"p.json: size=.*the model's 224 x 224"):
      interchange.preprocessing_from_hf(unsupported, 'p.json', 224, default)
  # fields a file leaves out are the family's; an old config's integer size is the shortest edge
  assert interchange.preprocessing_from_hf({}, 'p.json', 224, default) == default
  assert interchange.preprocessing_from_hf({'size': 224, 'crop_size': 224}, 'p.json', 224, default).resize == (
      'shorter_side_crop')


@pytest.mark.slow  # imports torch
def test_presets_preprocess_as_open_clips_own_configs_of_their_weights():
  pretrained = import_open_clip_module('pretrained')  # skips without torch or open_clip
  checked = 0
  for name in sorted(models.PRESETS):
    tag = next((t for t in ('openai', 'webli') if t in pretrained.list_pretrained_tags_by_model(name)), None)
    if tag is None:
      continue
    theirs = pretrained.get_pretrained_cfg(name, tag)
    want = {'image_mean': tuple(theirs['mean']), 'image_std': tuple(theirs['std']),
            'image_interpolation': theirs['interpolation'], 'image_resize_mode': theirs['resize_mode']}
    fmt = 'openai' if tag == 'openai' else 'open_clip'
    assert interchange.open_clip_preprocess_arguments(interchange.model_config_for(name, fmt)) == want, name
    checked += 1
  assert checked >= 10  # the CLIP presets of OpenAI's weights and the SigLIP presets
