"""What the trainer checks before it trains: every missing input listed at once, the memory the compiled step needs
against the machine's, no empty checkpoints/ folder left by a start that failed, and (training/start_checks.py) the
tokenizer and a few records against what the model and the objective need, for every shipped full-scale config."""
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import sentencepiece

from support import ROOT, write_webdataset
from vlp_jax import errors, hardware, parallel
from vlp_jax.config import from_file, validate
from vlp_jax.data import formats
from vlp_jax.data.sources import synthetic_shapes as synthetic
from vlp_jax.data.storage import records
from vlp_jax.data.storage.record_needs import RecordNeed, unmet_needs
from vlp_jax.data.text.clip_bpe import default_tokenizer
from vlp_jax.data.text.tokenizer_factory import cached_tokenizer, vocabulary_size
from vlp_jax.training import loop, start_checks
from vlp_jax.training import step as step_lib
from vlp_jax.training.flops import program_memory
from vlp_jax.training.loop import check_config_and_inputs, train_and_evaluate


def test_every_missing_input_is_listed_at_once_with_its_fix(tmp_path):
  config = from_file(os.path.join(ROOT, 'configs', 'saco_cc3m.py'))
  config.init.checkpoint = str(tmp_path / 'no_such_checkpoint')
  with pytest.raises(errors.DataNotFoundError) as caught:
    check_config_and_inputs(config)
  message = str(caught.value)
  assert message.startswith('this run needs 6 inputs it does not have:')
  assert '1. config.objective.saco.beta > 0 (pseudo-affinity mimic) needs teacher embeddings' in message
  assert '2. config.data.path is empty' in message and 'python -m vlp_jax.convert' in message
  assert f"3. config.init.checkpoint='{tmp_path}/no_such_checkpoint' does not exist" in message
  # the paper's eval sets (issue 61 item 13), found missing now rather than after compiling (issue 61 check d)
  assert "4. config.eval.datasets has imagenet2012, read from config.data.tfds_dir='': tfds dataset imagenet2012 " \
         'is not prepared' in message
  assert "5. config.eval.datasets has coco_captions, read from config.data.tfds_dir=''" in message
  assert "6. config.eval.datasets has flickr30k: no dataset_flickr30k.json in config.data.flickr30k_dir=''" in message
  assert errors.exit_code(caught.value) == errors.EXIT_CONFIG


def test_missing_eval_sets_stop_the_run_before_anything_is_built(micro, tmp_path, monkeypatch):
  # Issue 61 check d: the full-scale configs evaluate ImageNet (with its linear probe's train split), COCO and
  # Flickr30k; without their folders a run stopped at its first evaluation set, after building data and state.
  micro.eval.datasets = ('synthetic', 'imagenet2012', 'flickr30k')
  micro.eval.tasks = ('zeroshot', 'retrieval', 'linear_probe')
  micro.data.tfds_dir = str(tmp_path / 'tfds')
  monkeypatch.setattr(loop, 'build_context', lambda *a: pytest.fail('built the run before finding its inputs'))
  with pytest.raises(errors.DataNotFoundError) as caught:
    train_and_evaluate(micro, str(tmp_path / 'run'))
  lines = str(caught.value).split('\n')
  assert lines[0] == 'this run needs 2 inputs it does not have:'
  assert lines[1].startswith(f"1. config.eval.datasets has imagenet2012, read from config.data.tfds_dir='{tmp_path}/"
                             f"tfds': tfds dataset imagenet2012 is not prepared in {tmp_path}/tfds")  # train split too
  assert any(line.startswith('  tfds build imagenet2012 ') for line in lines)  # and how to prepare it
  assert any(line.startswith("2. config.eval.datasets has flickr30k: no dataset_flickr30k.json in "
                             "config.data.flickr30k_dir=''") for line in lines)
  assert errors.exit_code(caught.value) == errors.EXIT_CONFIG and not (tmp_path / 'run').exists()
  # the Flickr30k folder given, and ImageNet prepared with only its eval split: the probe's train split is named
  flickr = tmp_path / 'flickr30k'
  flickr.mkdir()
  (flickr / 'dataset_flickr30k.json').write_text('{"images": []}')
  version = tmp_path / 'tfds' / 'imagenet2012' / '5.1.0'
  version.mkdir(parents=True)
  (version / 'dataset_info.json').write_text(json.dumps({'fileFormat': 'array_record',
                                                         'splits': [{'name': 'validation'}]}))
  micro.data.flickr30k_dir = str(flickr)
  with pytest.raises(errors.DataNotFoundError, match=r"^config.eval.datasets has imagenet2012, read from "
                                                     r"config.data.tfds_dir='.*': tfds dataset imagenet2012 in .* has "
                                                     r"the splits \['validation'\], not 'train'"):
    check_config_and_inputs(micro)
  micro.eval.tasks = ('zeroshot', 'retrieval')  # no probe: nothing missing
  check_config_and_inputs(micro)


@pytest.mark.slow
def test_a_start_that_fails_on_its_data_leaves_no_empty_checkpoint_folder(tmp_path):
  config = from_file(os.path.join(ROOT, 'configs', 'clip_shapes.py'))
  shard = tmp_path / 'web' / 'broken.tar'
  shard.parent.mkdir()
  shard.write_bytes(b'not a tar file at all' * 40)  # found when the first batch is read, after checkpoints/ is made
  config.data.name, config.data.path, config.data.cache_dir = 'webdataset', str(shard), str(tmp_path / 'cache')
  config.eval.datasets = ('synthetic',)  # a small embedded set to evaluate on: the start gets to the first batch
  config.data.synthetic.update(num_train=64, num_val=16, num_test=16)
  workdir = tmp_path / 'run'
  with pytest.raises(errors.DataError, match='records in a row are bad'):
    train_and_evaluate(config, str(workdir))
  assert workdir.is_dir() and not (workdir / 'checkpoints').exists()


@pytest.mark.parametrize('needed, local, platform, limit, host, expected', [
    (2 * 2**30, 1, 'gpu', 80 * 2**30, 16 * 2**30, None),
    (90 * 2**30, 1, 'gpu', 80 * 2**30, 512 * 2**30, 'needs 90.0 GiB per device, and a gpu device here has 80.0 GiB'),
    (3 * 2**30, 8, 'cpu', None, 16 * 2**30, 'needs 24.0 GiB of host memory (8 CPU devices), and this machine has '
                                            '16.0 GiB'),
    (3 * 2**30, 4, 'cpu', None, 16 * 2**30, None),
    (2**40, 1, 'tpu', None, 2**30, None),  # no limit known: nothing to say
])
def test_memory_shortfall_compares_the_step_with_the_devices_memory(needed, local, platform, limit, host, expected):
  assert hardware.memory_shortfall(needed, local, platform, limit, host) == expected


def test_the_step_memory_counts_arguments_outputs_and_temporaries_less_donated_buffers():
  x = jnp.ones((256, 256), jnp.float32)
  kept = jax.jit(lambda a: a * 2).lower(x).compile()
  donated = jax.jit(lambda a: a * 2, donate_argnums=0).lower(x).compile()
  analysis = kept.memory_analysis()
  assert program_memory(kept) == (analysis.argument_size_in_bytes + analysis.output_size_in_bytes
                                  + analysis.temp_size_in_bytes)
  assert program_memory(kept) >= 2 * x.nbytes
  assert program_memory(donated) == program_memory(kept) - x.nbytes  # the output reuses the donated input


def test_a_step_that_cannot_fit_stops_before_it_runs(monkeypatch):
  mesh = parallel.make_mesh(1, jax.devices()[:1])
  step_lib.check_memory(2**30, mesh)  # fits this machine
  monkeypatch.setattr(hardware, 'host_memory_bytes', lambda: 2**29)
  with pytest.raises(errors.ConfigError, match=r'the compiled train step needs 1.0 GiB of host memory \(1 CPU '
                                               r'device\), and this machine has 0.5 GiB: lower config.batch_size'):
    step_lib.check_memory(2**30, mesh)
  step_lib.check_memory(None, mesh)  # a backend without a memory analysis: nothing to check


# ------------------------------------------------------------------------------------------ start checks (issue 61)

FULL_SCALE_CONFIGS = ('clip_cc3m', 'cosmos_cc3m', 'saco_cc3m', 'slip_cc3m', 'siglip2_webli', 'zerovl_multisource',
                      'clip_continue', 'saco_continue', 'siglip2_continue')


def test_the_list_holds_every_shipped_full_scale_config():
  # A new full-scale config is checked here too: it joins FULL_SCALE_CONFIGS (with data that has what it reads).
  shipped = {os.path.basename(p)[:-3] for p in os.listdir(os.path.join(ROOT, 'configs')) if p.endswith('.py')}
  full = {n for n in shipped if not n.endswith(('_shapes', 'shapes_base')) and n != '__init__'}
  assert full == set(FULL_SCALE_CONFIGS)


def _write_shards(directory, count: int, long_captions: bool = True, regions: bool = False, source: str = 'studio'
                  ) -> str:
  """`count` embedded-dataset records of `source` in one ArrayRecord shard under `directory`, with or without their
  long captions and regions; returns the directory."""
  examples = (dict(synthetic.make_example(0, 'train', source, i, 16, regions=regions),
                   **({} if long_captions else {'long_caption': ''})) for i in range(count))
  records.write_shards(examples, str(directory), 'train', count, 1)
  return str(directory)


@pytest.fixture(scope='module')
def gemma_spm(tmp_path_factory) -> str:
  """A 300-piece SentencePiece model with Gemma's special pieces (<pad> 0, <eos> 1, <unk> 2)."""
  directory = tmp_path_factory.mktemp('gemma_spm')
  words = ['red', 'green', 'blue', 'circle', 'square', 'triangle', 'small', 'large', 'on', 'a', 'the', 'left']
  rng = np.random.default_rng(0)
  sentences = [' '.join(rng.choice(words, 6)) + ' ' + ''.join(rng.choice(list('bcdfglmnprst'), 5))
               for _ in range(2000)]
  sentencepiece.SentencePieceTrainer.train(
      sentence_iterator=iter(sentences), model_prefix=str(directory / 'tokenizer'), vocab_size=300,
      model_type='unigram', pad_id=0, eos_id=1, unk_id=2, bos_id=-1, pad_piece='<pad>', eos_piece='<eos>',
      unk_piece='<unk>', num_threads=1, minloglevel=2)
  return str(directory / 'tokenizer.model')


def _full_config(name: str, data_path: str, gemma_spm: str, data_name: str = 'array_record'):
  config = from_file(os.path.join(ROOT, 'configs', f'{name}.py'))
  config.data.name, config.data.path = data_name, data_path
  if config.model.text.get('tokenizer') == 'gemma':
    config.model.text.tokenizer_path = gemma_spm  # the user's (the config leaves it empty)
  return config


def test_vocabulary_size_counts_every_id_the_tokenizer_emits(gemma_spm):
  # Naive reference: the largest id any row of a tokenised text holds, special tokens included, is below it.
  texts = ['a red circle on the left', 'zzqx unknown words', '']
  for tokenizer, text in ((default_tokenizer(), {}), (cached_tokenizer('gemma', gemma_spm),
                                                      {'tokenizer': 'gemma', 'tokenizer_path': gemma_spm})):
    size = vocabulary_size(text)
    assert int(tokenizer(texts, context_length=16).max()) < size
    assert size == max(tokenizer.vocab_size, tokenizer.eot_token + 1, tokenizer.pad_token + 1)
  assert vocabulary_size({}) == 49408 and vocabulary_size({'tokenizer': 'gemma', 'tokenizer_path': gemma_spm}) == 300


def test_a_tokenizer_larger_than_the_text_table_stops_the_start(micro, tmp_path):
  # Issue 61 item 6: a table one row short of CLIP's BPE (as a 262k Gemma 3 vocabulary on a 256k table). On 143c8f2
  # the run compiled and trained, the last id clamped by the embedding's gather.
  micro.model.text.vocab_size = 49407
  with pytest.raises(errors.ConfigError) as caught:
    train_and_evaluate(micro, str(tmp_path / 'run'), stop_at_step=1)
  message = str(caught.value)
  assert ("the tokenizer (config.model.text.tokenizer='clip_bpe') emits 49408 ids, and the text tower has "
          'config.model.text.vocab_size=49407 rows') in message
  assert '--config.model.text.vocab_size=49408' in message
  assert errors.exit_code(caught.value) == errors.EXIT_CONFIG
  assert not (tmp_path / 'run' / 'checkpoints').exists()


def test_a_sentencepiece_tokenizer_is_checked_against_the_table_by_its_path(gemma_spm):
  text = from_file(os.path.join(ROOT, 'configs', 'siglip2_webli.py')).model.text
  text.tokenizer_path = gemma_spm
  assert start_checks.vocabulary_problem(text) is None  # 300 ids on a 256k table
  text.vocab_size = 299
  problem = start_checks.vocabulary_problem(text)
  assert f"config.model.text.tokenizer='gemma', tokenizer_path='{gemma_spm}') emits 300 ids" in problem
  assert 'config.model.text.vocab_size=299 rows: ids 299 to 299' in problem


def test_unmet_needs_count_the_records_that_carry_each_field():
  need = RecordNeed('long_caption', "config.objective.name='cosmos'", 'convert with long captions', 0.9)
  some = RecordNeed('regions', 'config.objective.decoder_tasks', 'drop them', 0.0)
  examples = [{'long_caption': 'One. Two.', 'regions': []} for _ in range(9)] + [{'long_caption': '  '}]
  assert unmet_needs([need, some], examples, 'x') == [
      "config.objective.decoder_tasks needs the records' 'regions', and 0 of the 10 records read (x) carry it (1 "
      'needed): drop them']
  examples[0]['regions'] = [{'box': [0, 0, 1, 1], 'text': 'a'}]
  examples[1]['long_caption'] = ''  # 8 of 10: fewer than 90%
  assert unmet_needs([need, some], examples, 'x') == [
      "config.objective.name='cosmos' needs the records' 'long_caption', and 8 of the 10 records read (x) carry it "
      '(9 needed): convert with long captions']
  assert unmet_needs([need], [], 'x') == []  # nothing read: nothing to judge


def test_cosmos_on_records_without_long_captions_stops_the_start(micro, tmp_path):
  # Issue 61 item 14: webdataset samples have no long caption; on 143c8f2 COSMOS trained on, every text crop the
  # short caption.
  micro.objective.update(name='cosmos', num_local_crops=1, num_local_texts=1, local_crop_size=8)
  tars = write_webdataset(str(tmp_path / 'web'), {'web': 1}, samples_per_shard=8)['web']
  micro.data.update(name='webdataset', path=','.join(tars), cache_dir=str(tmp_path / 'cache'))
  with pytest.raises(errors.ConfigError) as caught:
    train_and_evaluate(micro, str(tmp_path / 'run'), stop_at_step=1)
  message = str(caught.value)
  assert message.startswith("config.objective.name='cosmos' needs the records' 'long_caption', and 0 of the 6 records "
                            f'read (the first of {tars[0]}) carry it')
  assert '--long_captions' in message and errors.exit_code(caught.value) == errors.EXIT_CONFIG


def test_every_source_is_sampled(tmp_path, gemma_spm):
  with_long = _write_shards(tmp_path / 'a', 32, source='studio')
  without = _write_shards(tmp_path / 'b', 32, long_captions=False, source='web')
  config = _full_config('cosmos_cc3m', with_long, gemma_spm)
  assert start_checks.start_problems(config, formats.train_paths(config.data)) == []
  config.data.path = f'{with_long},{without}'  # half the sample from each source's first shard
  (problem,) = start_checks.start_problems(config, formats.train_paths(config.data))
  assert "'long_caption', and 16 of the 32 records read (the first of 2 shards, one per source" in problem


@pytest.mark.parametrize('name', FULL_SCALE_CONFIGS)
def test_full_scale_configs_pass_on_data_with_what_they_need_and_refuse_a_small_table(name, tmp_path, gemma_spm):
  regions = name == 'siglip2_webli'  # its location tasks read regions: ArrayRecord shards that carry them
  config = _full_config(name, _write_shards(tmp_path / 'shards', 8, regions=regions), gemma_spm)
  if name == 'zerovl_multisource':
    config.data.path += ',' + _write_shards(tmp_path / 'other', 8, source='web')
  paths = formats.train_paths(config.data)
  assert start_checks.start_problems(config, paths) == []
  ids = vocabulary_size(config.model.text)
  config.model.text.vocab_size = ids - 1
  (problem,) = start_checks.start_problems(config, paths)
  assert f'emits {ids} ids, and the text tower has config.model.text.vocab_size={ids - 1} rows' in problem


@pytest.mark.parametrize('name, field', [('cosmos_cc3m', 'long_caption'), ('siglip2_webli', 'regions')])
def test_full_scale_configs_refuse_webdataset_tars_that_lack_a_field_they_read(name, field, tmp_path, gemma_spm):
  tars = write_webdataset(str(tmp_path / 'web'), {'web': 2}, samples_per_shard=8)['web']
  config = _full_config(name, ','.join(tars), gemma_spm, data_name='webdataset')
  config.data.cache_dir = str(tmp_path / 'cache')
  if name == 'siglip2_webli':
    config.objective.decoder_tasks = ('cap', 'aref', 'gcap')  # as the paper (the tars carry no regions)
  with pytest.raises(errors.ConfigError, match=rf"needs the records' '{field}', and 0 of the 6 records read") as caught:
    start_checks.check_start(config, formats.train_paths(config.data))
  assert str(caught.value).startswith(f"config.objective.name='{config.objective.name}'")  # names the objective
  if name == 'siglip2_webli':
    config.objective.decoder_tasks = ('cap',)  # captioning reads the caption alone
    start_checks.check_start(config, formats.train_paths(config.data))


def test_location_tasks_refuse_image_settings_the_boxes_cannot_follow():
  # Issue 61 item 10: a random crop or augmentation policy moves the pixels under the decoder's boxes.
  config = from_file(os.path.join(ROOT, 'configs', 'siglip2_shapes.py'))
  config.data.crop_scale = (0.5, 1.0)
  with pytest.raises(errors.ConfigError, match=r'config.data.crop_scale=\(0.5, 1.0\) crops the image at random'):
    validate(config)
  config.data.crop_scale, config.data.augment = (), 'randaugment'
  with pytest.raises(errors.ConfigError, match=r"config.data.augment='randaugment' moves the image's pixels"):
    validate(config)
  config.objective.decoder_tasks = ('cap',)
  validate(config)


def test_each_component_declares_what_it_reads(micro):
  assert start_checks.record_needs(micro) == []  # CLIP on its captions
  micro.objective.text_source = 'text_crops'  # CLIP on COSMOS's text crops
  assert [n.field for n in start_checks.record_needs(micro)] == ['long_caption']
  micro.objective = from_file(os.path.join(ROOT, 'configs', 'saco_cc3m.py')).objective
  micro.objective.name = 'cosmos'  # COSMOS with the SaCo term
  assert [(n.field, n.needed_by) for n in start_checks.record_needs(micro)] == [
      ('long_caption', "config.objective.name='cosmos'")]
  micro.objective = from_file(os.path.join(ROOT, 'configs', 'siglip2_shapes.py')).objective
  assert [n.field for n in start_checks.record_needs(micro)] == ['regions']
  micro.objective.decoder_tasks = ('cap',)
  assert start_checks.record_needs(micro) == []


def test_a_caption_field_no_record_fills_stops_the_start(micro, tmp_path):
  # On 143c8f2 every record was skipped as bad until the data guard stopped the run (exit 4, after compiling).
  micro.data.update(name='array_record', path=_write_shards(tmp_path / 'shards', 16, long_captions=False),
                    caption_field='long_caption')
  with pytest.raises(errors.ConfigError) as caught:
    train_and_evaluate(micro, str(tmp_path / 'run'), stop_at_step=1)
  message = str(caught.value)
  assert message.startswith("config.data.caption_field='long_caption' is empty in all 16 records read (the first of ")
  assert "their text fields are ['canonical_caption', 'caption']" in message
  assert errors.exit_code(caught.value) == errors.EXIT_CONFIG
