"""NaFlex host preprocessing (data/image/naflex_patches.py) against transformers' Siglip2ImageProcessor (its PIL
backend: the one that runs without torchvision): the same grids and the same pixel values, for four aspect ratios and
two budgets."""
import numpy as np
import pytest

from vlp_jax.data.image.image_ops import SIGLIP2_NAFLEX_PREPROCESSING
from vlp_jax.data.image.naflex_patches import naflex_grid, naflex_patches

# 1:1 (at budget 64 already 8 x 8 patches of 16: no resize), 1:4, 4:1, 3:2 (height:width) and an odd size.
SIZES = [(128, 128), (50, 200), (300, 75), (120, 180), (97, 61)]


def _image(height, width, seed=0):
  return np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)


@pytest.mark.parametrize('max_patches', [64, 256])
def test_naflex_patches_equal_transformers_siglip2_image_processor(max_patches):
  transformers = pytest.importorskip('transformers', reason='transformers is the reference')
  processor = transformers.Siglip2ImageProcessorPil(patch_size=16, max_num_patches=max_patches)
  for height, width in SIZES:
    image = _image(height, width)
    expected = processor(images=[image], return_tensors='np')
    patches, shape = naflex_patches(image, 16, max_patches, SIGLIP2_NAFLEX_PREPROCESSING)
    np.testing.assert_array_equal(shape, expected['spatial_shapes'][0], err_msg=f'{height}x{width}')
    assert patches.shape == (max_patches, 16 * 16 * 3) and patches.dtype == np.float32
    np.testing.assert_allclose(patches, expected['pixel_values'][0], atol=1e-5, rtol=0, err_msg=f'{height}x{width}')
    assert np.all(patches[shape[0] * shape[1]:] == 0)


def test_naflex_grid_is_transformers_rule():
  pytest.importorskip('transformers', reason='transformers is the reference')
  from transformers.models.siglip2.image_processing_pil_siglip2 import get_image_size_for_max_num_patches
  rng = np.random.default_rng(0)
  cases = [(1, 1000, 16, 256), (1000, 1, 16, 64), (480, 640, 16, 256), (16, 16, 16, 1), (7, 9, 14, 1024)]
  cases += [(*rng.integers(1, 2000, 2), int(rng.choice([14, 16])), int(rng.choice([64, 128, 256, 576, 784, 1024])))
            for _ in range(200)]
  for height, width, patch, budget in cases:
    rows, cols = naflex_grid(int(height), int(width), patch, budget)
    assert 1 <= rows * cols <= budget
    expected = get_image_size_for_max_num_patches(int(height), int(width), patch, budget)
    assert (rows * patch, cols * patch) == expected, (height, width, patch, budget)
  with pytest.raises(ValueError, match='max_patches=0'):
    naflex_grid(10, 10, 16, 0)
  with pytest.raises(ValueError, match=r'uint8 \[H, W, 3\]'):
    naflex_patches(np.zeros((10, 10), np.uint8), 16, 64, SIGLIP2_NAFLEX_PREPROCESSING)
