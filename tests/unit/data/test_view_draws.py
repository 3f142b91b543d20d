"""transforms.dino_view_draws advances a generator exactly as making a DINO view does (random_resized_crop then
dino_augment), for images of any size and every option that changes which draws are made."""
import numpy as np
import pytest

from vlp_jax.data.image import transforms


@pytest.mark.parametrize('jitter', [(0.4, 0.4, 0.2, 0.1), (0.4, 0.4, 0.2, 0.0), (0.0, 0.3, 0.0, 0.2)])
@pytest.mark.parametrize('scale,blur_p,grayscale_p,solarize_p', [((0.05, 0.4), 0.5, 0.2, 0.0),
                                                                  ((0.4, 1.0), 1.0, 0.0, 0.2),
                                                                  ((0.9, 1.0), 0.1, 1.0, 1.0)])
def test_the_draws_of_a_view_without_the_view(jitter, scale, blur_p, grayscale_p, solarize_p):
  for seed in range(30):
    shape = np.random.default_rng(seed).integers(3, 60, 2)  # some too thin for a crop: the fallback path
    if seed % 5 == 0:
      shape = (2, 57)
    image = np.random.default_rng(seed).integers(0, 256, (*shape, 3), dtype=np.uint8)
    made, drawn = np.random.default_rng([seed, 1]), np.random.default_rng([seed, 1])
    transforms.dino_augment(transforms.random_resized_crop(image, 8, scale, made), made, jitter, grayscale_p, blur_p,
                            solarize_p)
    transforms.dino_view_draws(image.shape[0], image.shape[1], scale, drawn, jitter, grayscale_p, blur_p, solarize_p)
    assert made.bit_generator.state == drawn.bit_generator.state, (seed, shape)
    assert made.random() == drawn.random()
