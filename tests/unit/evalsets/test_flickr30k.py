"""Flickr30k retrieval from a local copy in Karpathy's layout: dataset_flickr30k.json and flickr30k-images/."""
import json
import os

import numpy as np
from PIL import Image
import pytest

from vlp_jax import errors
from vlp_jax import evalsets
from vlp_jax.data.image import image_ops
from vlp_jax.data.storage import records
from vlp_jax.evalsets import flickr30k
from vlp_jax.evaluation import EVALUATORS

# (split, number of sentences) per image, in file order; one test image has 6 sentences (the protocol keeps 5)
ENTRIES = (('train', 5), ('test', 5), ('val', 5), ('test', 6), ('restval', 5), ('test', 5), ('train', 5))


def _write(directory, image_folder='flickr30k-images'):
  os.makedirs(os.path.join(directory, image_folder))
  rng = np.random.default_rng(0)
  images = []
  for i, (split, count) in enumerate(ENTRIES):
    filename = f'{1000 + i}.jpg'
    Image.fromarray(rng.integers(0, 256, (20, 28, 3), dtype=np.uint8)).save(
        os.path.join(directory, image_folder, filename))
    images.append({'filename': filename, 'imgid': i, 'split': split, 'sentids': list(range(count)),
                   'sentences': [{'raw': f'image {i} sentence {j}.', 'tokens': ['image', str(i)], 'imgid': i,
                                  'sentid': 10 * i + j} for j in range(count)]})
  with open(os.path.join(directory, 'dataset_flickr30k.json'), 'w') as f:
    json.dump({'images': images, 'dataset': 'flickr30k'}, f)
  return directory


def test_test_split_keeps_five_captions_per_image(tmp_path, micro):
  micro.data.flickr30k_dir = _write(str(tmp_path))
  eval_set = evalsets.load_eval_set('flickr30k', micro.data, 'test', 16)
  assert eval_set.name == 'flickr30k' and eval_set.images.shape == (3, 16, 16, 3)
  assert (eval_set.labels == -1).all() and eval_set.class_names == ()
  assert np.bincount(eval_set.caption_image).tolist() == [5, 5, 5]
  test_images = [i for i, (split, _) in enumerate(ENTRIES) if split == 'test']  # 1, 3, 5
  assert eval_set.captions == [f'image {i} sentence {j}.' for i in test_images for j in range(5)]
  with open(os.path.join(tmp_path, 'flickr30k-images', '1003.jpg'), 'rb') as f:  # the second test image
    expected = image_ops.normalize_image(image_ops.resize_image(records.decode_image(f.read()), 16))
  np.testing.assert_allclose(eval_set.images[1], expected)
  val = evalsets.load_eval_set('flickr30k', micro.data, 'val', 16)
  assert len(val.images) == 1 and val.captions[0] == 'image 2 sentence 0.'
  micro.data.eval_max_examples = 2
  two = evalsets.load_eval_set('flickr30k', micro.data, 'test', 16)
  assert len(two.images) == 2 and two.captions == eval_set.captions[:10]


def test_images_folder_and_all_captions(tmp_path):
  directory = _write(str(tmp_path), image_folder='images')
  eval_set = flickr30k.flickr30k_eval_set(directory, 'test', 8)
  assert len(eval_set.images) == 3 and eval_set.images[0].shape == (8, 8, 3)
  names, captions, caption_image = flickr30k.read_karpathy(os.path.join(directory, 'dataset_flickr30k.json'), 'test',
                                                           max_captions_per_image=None)
  assert names == ['1001.jpg', '1003.jpg', '1005.jpg'] and len(captions) == 16
  assert np.bincount(caption_image).tolist() == [5, 6, 5]


def test_retrieval_evaluates_the_captions_of_each_image(tmp_path, micro):
  """An encoder that embeds a caption as the one-hot of its image's number gets perfect recall; one that ignores
  the text gets what a random ranking gives."""
  micro.data.flickr30k_dir = _write(str(tmp_path))
  eval_set = evalsets.load_eval_set('flickr30k', micro.data, 'test', 16)
  assert EVALUATORS.get('retrieval').applies(eval_set) and not EVALUATORS.get('zeroshot').applies(eval_set)
  image_number = {1: 0, 3: 1, 5: 2}

  class CaptionEncoder:
    def texts(self, captions):
      return np.eye(3)[[image_number[int(c.split()[1])] for c in captions]]
  metrics = EVALUATORS.get('retrieval').fn(CaptionEncoder(), eval_set, np.eye(3))
  assert metrics['i2t_r1'] == 1.0 and metrics['t2i_r1'] == 1.0

  class Shuffled(CaptionEncoder):  # every caption embeds as the next image's
    def texts(self, captions):
      return np.roll(super().texts(captions), 1, axis=1)
  missed = EVALUATORS.get('retrieval').fn(Shuffled(), eval_set, np.eye(3))
  assert missed['i2t_r1'] == 0.0 and missed['t2i_r1'] == 0.0


def test_missing_copy_says_how_to_get_it(tmp_path, micro):
  micro.data.flickr30k_dir = str(tmp_path)
  with pytest.raises(errors.DataNotFoundError, match='no dataset_flickr30k.json in config.data.flickr30k_dir') as error:
    evalsets.load_eval_set('flickr30k', micro.data, 'test', 16)
  assert '--config.data.flickr30k_dir=DIR' in str(error.value)
  micro.data.flickr30k_dir = ''
  with pytest.raises(errors.DataNotFoundError, match='flickr30k_dir'):
    evalsets.load_eval_set('flickr30k', micro.data, 'test', 16)
  directory = _write(str(tmp_path / 'copy'))
  os.remove(os.path.join(directory, 'flickr30k-images', '1003.jpg'))
  with pytest.raises(errors.DataNotFoundError, match=r'1 image\(s\) missing, e.g. .*1003.jpg'):
    flickr30k.flickr30k_eval_set(directory, 'test', 16)
  with open(os.path.join(directory, 'dataset_flickr30k.json'), 'w') as f:
    json.dump({'images': [{'file': 'x.jpg'}]}, f)
  with pytest.raises(ValueError, match='not in the Karpathy format'):
    flickr30k.flickr30k_eval_set(directory, 'test', 16)
