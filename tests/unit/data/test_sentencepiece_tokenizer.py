"""SigLIP's SentencePiece tokenizer (vlp_jax.data.text.siglip_sentencepiece.SentencePieceTokenizer) and the choice of
tokenizer by the model config (`tokenizer_for`, and the views, encoder and inference that tokenise through it).

The reference is transformers' `SiglipTokenizer` called as SigLIP's processor calls it, on a tiny unigram model
trained here offline, its special ids laid out as T5's (whose layout SigLIP's spiece.model shares): '<pad>' 0,
'</s>' 1, '<unk>' 2, no '<s>'. SentencePiece's trainer cannot give padding and EOS one id; SiglipTokenizer pads with
'</s>' anyway (its default), so rows end and pad with id 1 and '<pad>' is never used.
"""
from __future__ import annotations

import os
import pickle
import random
import shutil
import types

import ml_collections
import numpy as np
import pytest
import sentencepiece

from vlp_jax import parallel
from vlp_jax.data.text.clip_bpe import default_tokenizer
from vlp_jax.data.text.siglip_sentencepiece import SentencePieceTokenizer, canonicalize_text
from vlp_jax.data.text.tokenizer_factory import tokenizer_for
from vlp_jax.errors import ConfigError
from vlp_jax.evaluation.encoder import Encoder
from vlp_jax.inference import LoadedModel
from vlp_jax.objectives.base import OBJECTIVES
from vlp_jax.objectives.cosmos import CosmosViews
from vlp_jax.objectives.slip import SlipViews
from vlp_jax.objectives.views import ClipViews

EOS, UNK, PAD_PIECE = 1, 2, 0  # the trained model's ids of '</s>', '<unk>' and the unused '<pad>'
CONTEXT_LENGTHS = (16, 64)  # 64: SigLIP's

LONG = ' '.join(['a small dog on the red table'] * 12)  # 84 words: longer than both context lengths
CAPTIONS = [
    'A photo of a cat.',
    'Two DOGS playing in the park!!',
    "a man's red umbrella, on the beach; (blurry)",
    'café naïve über straße',
    'ＦＵＬＬ width and “curly quotes” — an em dash…',  # NFKC in SentencePiece; punctuation that is not ASCII
    'emoji 🐱 and 猫 cat',  # characters the vocabulary cannot spell: '<unk>'
    '',
    '   \t\n ',
    'tabs\tand\nnew   lines',
    'under_score and hy-phen',
    'a \u2581 mark in the text',
    'UPPER lower MiXeD',
    LONG,
]
# Literal special tokens are tokens of their own in transformers (the tokenizer.json route differs right after them).
SPECIAL_CAPTIONS = ['the end </s> and an <unk> inside', '</s>', '</s> hi', '!!! </s>', 'ends with </s>',
                    '  </s>  </s>  x <unk>y']
# Normaliser settings of the trained models: SentencePiece's defaults (SigLIP's), and two that change what
# transformers' handling of the start of a text gives (a lone '▁' piece, which it drops before a special token).
MODEL_OPTIONS = {'default': {}, 'keep_whitespace': {'remove_extra_whitespaces': False},
                 'no_dummy_prefix': {'add_dummy_prefix': False}}


def _training_sentences() -> list[str]:
  rng = random.Random(0)
  caption_words = canonicalize_text(' '.join(CAPTIONS)).split()
  syllables = [c + v for c in 'bcdfglmnprst' for v in 'aeiou']
  filler = [''.join(rng.choice(syllables) for _ in range(rng.randint(1, 3))) for _ in range(300)]
  return [' '.join(rng.choice(caption_words if rng.random() < 0.5 else filler) for _ in range(rng.randint(3, 12)))
          for _ in range(3000)]


def _train(directory, **options) -> str:
  """A 300-piece unigram spiece.model with SigLIP's special ids, in `directory` (trained in about 0.1 s)."""
  sentencepiece.SentencePieceTrainer.train(
      sentence_iterator=iter(_training_sentences()), model_prefix=str(directory / 'spiece'), vocab_size=300,
      model_type='unigram', pad_id=PAD_PIECE, eos_id=EOS, unk_id=UNK, bos_id=-1, pad_piece='<pad>',
      eos_piece='</s>', unk_piece='<unk>', num_threads=1, minloglevel=2, **options)
  return str(directory / 'spiece.model')


@pytest.fixture(scope='module')
def spiece_models(tmp_path_factory) -> dict[str, str]:
  """{variant: the path of its spiece.model} for the MODEL_OPTIONS."""
  return {name: _train(tmp_path_factory.mktemp(f'siglip_spiece_{name}'), **options)
          for name, options in MODEL_OPTIONS.items()}


@pytest.fixture(scope='module')
def spiece_model(spiece_models) -> str:
  return spiece_models['default']


def siglip_tokenizer(vocab_file: str):
  """transformers' SiglipTokenizer on a model, with its defaults (pad and EOS '</s>', unknown '<unk>')."""
  transformers = pytest.importorskip('transformers')
  pytest.importorskip('google.protobuf')  # SiglipTokenizer requires it
  return transformers.SiglipTokenizer(vocab_file=vocab_file)


@pytest.fixture(scope='module')
def siglip_reference(spiece_model):
  return siglip_tokenizer(spiece_model)


def reference_ids(reference, captions, context_length: int) -> np.ndarray:
  """[N, L] ids as SigLIP's processor asks them of the tokenizer."""
  out = reference(captions, padding='max_length', truncation=True, max_length=context_length)
  return np.asarray(out['input_ids'], np.int32)


@pytest.fixture(scope='module')
def tokenizer_json(spiece_model, siglip_reference, tmp_path_factory) -> str:
  """A tokenizer.json converted from the model by transformers' generic SentencePiece converter (it has no SigLIP
  converter of its own, so `convert_slow_tokenizer` refuses SiglipTokenizer)."""
  # the class from its module: `from transformers import convert_slow_tokenizer` gives the module or, once another
  # test has imported it through transformers' lazy namespace, the function of the same name
  from transformers.convert_slow_tokenizer import SpmConverter
  try:
    converted = SpmConverter(siglip_reference).converted()
  except Exception as error:  # noqa: BLE001 - any failure to build it offline
    pytest.skip(f'transformers cannot convert the SentencePiece model into a tokenizer.json offline: {error!r}')
  path = tmp_path_factory.mktemp('siglip_json') / 'tokenizer.json'
  converted.save(str(path))
  return str(path)


# ------------------------------------------------------------------------------------- ids as transformers'


@pytest.mark.filterwarnings('ignore:This sequence already has')
@pytest.mark.parametrize('variant', MODEL_OPTIONS)
@pytest.mark.parametrize('context_length', CONTEXT_LENGTHS)
def test_ids_equal_transformers_siglip_tokenizer(spiece_models, variant, context_length):
  captions = CAPTIONS + SPECIAL_CAPTIONS
  want = reference_ids(siglip_tokenizer(spiece_models[variant]), captions, context_length)
  got = SentencePieceTokenizer(spiece_models[variant])(captions, context_length=context_length)
  assert got.dtype == np.int32 and got.shape == (len(captions), context_length)
  for caption, want_row, got_row in zip(captions, want, got):
    np.testing.assert_array_equal(got_row, want_row, err_msg=repr(caption))
  # The comparison covers what matters: word pieces, unknown text, rows cut at L, rows padded to L.
  assert (want > 3).sum(axis=1).max() >= 5 and (want == UNK).any()
  assert want[CAPTIONS.index(LONG), -1] == EOS and want[CAPTIONS.index(LONG), -2] != EOS
  assert want[CAPTIONS.index(''), -1] == EOS


def test_rows_end_with_eos_and_pad_with_it_to_exactly_the_context_length(spiece_model):
  tokenizer = SentencePieceTokenizer(spiece_model)
  assert (tokenizer.eot_token, tokenizer.pad_token, tokenizer.unk_token, tokenizer.sot_token) == (EOS, EOS, UNK, None)
  assert tokenizer.vocab_size == 300 and tokenizer.context_length == 64
  ids = tokenizer.encode('a photo of a cat')
  assert ids and EOS not in ids
  row = tokenizer('a photo of a cat', context_length=16)
  assert row.shape == (1, 16) and row.dtype == np.int32
  np.testing.assert_array_equal(row[0], ids + [EOS] * (16 - len(ids)))  # padded with '</s>', never '<pad>' (0)
  long = tokenizer(LONG, context_length=16)[0]
  np.testing.assert_array_equal(long, tokenizer.encode(LONG)[:15] + [EOS])
  assert tokenizer(['x', 'y']).shape == (2, 64) and tokenizer([]).shape == (0, 64)
  np.testing.assert_array_equal(tokenizer('a', context_length=1), [[EOS]])
  with pytest.raises(ValueError, match='>= 1'):
    tokenizer('a', context_length=0)
  with pytest.raises(TypeError):
    tokenizer([b'bytes'])


def test_canonicalisation_is_siglips():
  assert canonicalize_text("  A Man's  RED\tumbrella,\n(on) the beach!! ") == 'a mans red umbrella on the beach'
  assert canonicalize_text('under_score hy-phen “quotes” — …') == 'underscore hyphen “quotes” — …'
  assert canonicalize_text(' \t\n') == ''


def test_decode_inverts_encode_on_canonical_text(spiece_model):
  tokenizer = SentencePieceTokenizer(spiece_model)
  row = tokenizer('A photo of a CAT!', context_length=16)[0]
  assert tokenizer.decode(row) == 'a photo of a cat'
  assert tokenizer.decode(tokenizer.encode('two dogs playing')) == 'two dogs playing'
  with pytest.raises(ValueError, match='outside'):
    tokenizer.decode([300])


# ----------------------------------------------------------------------------------------- tokenizer.json


@pytest.mark.parametrize('context_length', CONTEXT_LENGTHS)
def test_tokenizer_json_gives_the_ids_of_its_spiece_model(tokenizer_json, siglip_reference, context_length):
  tokenizer = SentencePieceTokenizer(tokenizer_json)
  assert tokenizer.path == tokenizer_json and (tokenizer.eot_token, tokenizer.pad_token) == (EOS, EOS)
  np.testing.assert_array_equal(tokenizer(CAPTIONS, context_length=context_length),
                                reference_ids(siglip_reference, CAPTIONS, context_length))


def test_a_folder_gives_its_spiece_model_before_its_tokenizer_json(spiece_model, tokenizer_json, tmp_path):
  both, json_only = tmp_path / 'both', tmp_path / 'json_only'
  for folder in (both, json_only):
    folder.mkdir()
    shutil.copy(tokenizer_json, folder / 'tokenizer.json')
  shutil.copy(spiece_model, both / 'spiece.model')
  assert SentencePieceTokenizer(both).path == str(both / 'spiece.model')
  assert SentencePieceTokenizer(json_only).path == str(json_only / 'tokenizer.json')
  text_config = {'tokenizer': 'sentencepiece', 'tokenizer_path': str(json_only)}
  assert tokenizer_for(text_config).path == str(json_only / 'tokenizer.json')


# ------------------------------------------------------------------------------------------------- errors


def test_a_missing_tokenizer_file_raises_naming_the_path_and_the_files_looked_for(tmp_path):
  missing = tmp_path / 'nowhere' / 'spiece.model'
  for path in (missing, tmp_path):  # no such file; a folder without either file
    with pytest.raises(ConfigError) as raised:
      SentencePieceTokenizer(path)
    assert str(path) in str(raised.value)
    assert 'spiece.model' in str(raised.value) and 'tokenizer.json' in str(raised.value)
  with pytest.raises(ValueError, match='config.model.text.tokenizer_path=.*nowhere.*spiece.model or tokenizer.json'):
    tokenizer_for({'tokenizer': 'sentencepiece', 'tokenizer_path': str(missing)})


def test_an_unreadable_tokenizer_file_raises_naming_it(tmp_path):
  (tmp_path / 'spiece.model').write_bytes(b'not a model')
  (tmp_path / 'tokenizer.json').write_text('{"not": "a tokenizer"}')
  with pytest.raises(ConfigError, match="spiece.model' is not a SentencePiece model"):
    SentencePieceTokenizer(tmp_path / 'spiece.model')
  with pytest.raises(ConfigError, match="tokenizer.json' is not a tokenizers tokenizer.json"):
    SentencePieceTokenizer(tmp_path / 'tokenizer.json')


@pytest.mark.parametrize('text_config', [{'tokenizer': 'sentencepiece'},
                                         {'tokenizer': 'sentencepiece', 'tokenizer_path': ''}])
def test_sentencepiece_without_a_path_raises_naming_the_key(text_config):
  with pytest.raises(ConfigError, match=r"config.model.text.tokenizer='sentencepiece' needs "
                                        r'config.model.text.tokenizer_path'):
    tokenizer_for(text_config)


def test_an_unknown_tokenizer_raises_naming_the_key_and_the_choices():
  with pytest.raises(ConfigError) as raised:
    tokenizer_for({'tokenizer': 'wordpiece', 'tokenizer_path': ''})
  message = str(raised.value)
  assert "config.model.text.tokenizer='wordpiece'" in message and 'clip_bpe' in message
  assert 'sentencepiece' in message


# ------------------------------------------------------------------------------- pickling and the cache


def test_pickling_keeps_the_ids_without_the_file(spiece_model, tmp_path):
  path = tmp_path / 'spiece.model'
  shutil.copy(spiece_model, path)
  tokenizer = SentencePieceTokenizer(path, context_length=16)
  data = pickle.dumps(tokenizer)
  path.unlink()  # a grain worker gets the model's content with the transform, not a path to read
  again = pickle.loads(data)
  assert repr(again) == repr(tokenizer) == (f"SentencePieceTokenizer(path={str(path)!r}, vocab_size=300, "
                                            'context_length=16)')
  np.testing.assert_array_equal(again(CAPTIONS + SPECIAL_CAPTIONS), tokenizer(CAPTIONS + SPECIAL_CAPTIONS))


def test_pickling_a_tokenizer_json_tokenizer(tokenizer_json):
  tokenizer = SentencePieceTokenizer(tokenizer_json)
  np.testing.assert_array_equal(pickle.loads(pickle.dumps(tokenizer))(CAPTIONS), tokenizer(CAPTIONS))


def test_tokenizer_for_reads_each_kind_and_path_once(spiece_model, tmp_path):
  text_config = {'tokenizer': 'sentencepiece', 'tokenizer_path': spiece_model}
  first = tokenizer_for(text_config)
  assert isinstance(first, SentencePieceTokenizer) and first.path == spiece_model
  # a ConfigDict, the model's FrozenConfigDict (with the other text keys) or a dict: the same object
  assert tokenizer_for(ml_collections.ConfigDict({**text_config, 'context_length': 16})) is first
  assert tokenizer_for(ml_collections.FrozenConfigDict({**text_config, 'width': 32})) is first
  copy = tmp_path / 'copy.model'
  shutil.copy(spiece_model, copy)
  other = tokenizer_for({'tokenizer': 'sentencepiece', 'tokenizer_path': str(copy)})
  assert other is not first and other.path == str(copy)


def test_clip_configs_keep_the_bpe_tokenizer(micro):
  assert micro.model.text.get('tokenizer', 'clip_bpe') == 'clip_bpe'
  assert tokenizer_for(micro.model.text) is default_tokenizer()
  assert tokenizer_for({'context_length': 77}) is default_tokenizer()  # a config older than the keys
  assert tokenizer_for(ml_collections.ConfigDict({'tokenizer': 'clip_bpe', 'tokenizer_path': ''})) is (
      default_tokenizer())
  views = OBJECTIVES.get('clip').views(micro)
  assert (views.tokenizer, views.tokenizer_path) == ('clip_bpe', '')
  example = {'image': np.zeros((20, 20, 3), np.uint8), 'caption': 'a red circle', 'label': 0}
  np.testing.assert_array_equal(views.random_map(example, np.random.default_rng(0))['text'],
                                default_tokenizer()('a red circle', context_length=16)[0])


# ----------------------------------------------------------------------------------- the model's tokenizer


def _siglip_text(config, spiece_model: str):
  config.model.text.tokenizer = 'sentencepiece'
  config.model.text.tokenizer_path = spiece_model
  return config


@pytest.mark.parametrize('objective', ['clip', 'siglip', 'slip', 'zerovl'])
def test_views_tokenize_with_the_model_tokenizer(micro, spiece_model, objective):
  config = _siglip_text(micro, spiece_model)
  config.objective.name = objective
  if objective == 'zerovl':
    config.objective.text_augment = False
  # grain pickles the views into its workers
  views = pickle.loads(pickle.dumps(OBJECTIVES.get(objective).views(config)))
  example = {'image': np.zeros((20, 20, 3), np.uint8), 'caption': 'Two DOGS playing in the park!', 'label': 3}
  text = views.random_map(example, np.random.default_rng(0))['text']
  want = SentencePieceTokenizer(spiece_model)(example['caption'], context_length=16)[0]
  np.testing.assert_array_equal(text, want)
  assert text[-1] == EOS and text.dtype == np.int32


@pytest.mark.parametrize('make_views', [lambda **kw: ClipViews(16, 16, **kw), lambda **kw: SlipViews(16, 16, **kw),
                                        lambda **kw: CosmosViews(16, 8, 16, 8, **kw)], ids=['clip', 'slip', 'cosmos'])
def test_views_read_the_tokenizer_when_built_not_in_the_workers(tmp_path, make_views):
  with pytest.raises(ConfigError, match=r'config.model.text.tokenizer_path=.*missing'):
    make_views(tokenizer='sentencepiece', tokenizer_path=str(tmp_path / 'missing'))


@pytest.mark.parametrize('objective, what', [('zerovl', 'config.objective.text_augment'),
                                             ('cosmos', "objective 'cosmos'")])
def test_objectives_that_need_bpe_ids_refuse_another_tokenizer(micro, spiece_model, objective, what):
  config = _siglip_text(micro, spiece_model)
  config.objective.name = objective
  cls = OBJECTIVES.get(objective)
  for check in (lambda: cls.validate(cls.options(config.objective), config), lambda: cls.views(config)):
    with pytest.raises(ValueError, match=f"{what}.*needs CLIP's BPE tokenizer.*'sentencepiece'"):
      check()
  config.model.text.tokenizer = 'clip_bpe'  # the same objective with CLIP's tokenizer builds its views
  assert cls.views(config) is not None


def test_encoder_and_loaded_model_tokenize_with_the_model_tokenizer(micro, spiece_model):
  config = _siglip_text(micro, spiece_model)
  captions = ['a photo of a cat', 'two dogs']
  want = SentencePieceTokenizer(spiece_model)(captions, context_length=16)
  # The tower is replaced by the identity on the tokens: what the encoder hands the model.
  model = types.SimpleNamespace(text=ml_collections.FrozenConfigDict(config.model.text),
                                vision=config.model.vision, apply=None)
  encoder = Encoder(model, {}, parallel.make_mesh(), batch_size=8)
  assert encoder.tokenizer is tokenizer_for(config.model.text)
  encoder._texts = lambda variables, tokens: tokens.astype(np.float32)
  np.testing.assert_array_equal(encoder.texts(captions), want)
  loaded = LoadedModel('checkpoint', config, encoder, batch_size=8)
  np.testing.assert_array_equal(loaded.tokenize(captions), want)


def test_clip_bpe_does_not_read_tokenizer_path():
  """A stale tokenizer_path in a CLIP config is harmless: CLIP's tokenizer never reads it."""
  text_config = {'tokenizer': 'clip_bpe', 'tokenizer_path': os.path.join('no', 'such', 'spiece.model')}
  assert tokenizer_for(text_config) is default_tokenizer()
