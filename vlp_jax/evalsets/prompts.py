"""Prompt templates for zero-shot classification: each eval set's own (its `templates`), and the named sets that
`config.eval.templates` may pick for every eval set instead.

A template set is a tuple of format strings with one '{}' for the class name; the zero-shot class embedding is the
mean of the normalised embeddings of a class's prompts, re-normalised (evaluation/zeroshot.py).

  openai_imagenet  OpenAI CLIP's 80 ImageNet prompts (the imagenet2012 default)
  cifar            CLIP's 18 CIFAR-10/100 prompts (the cifar10 and cifar100 default)
  simple           CLIP's single prompt 'a photo of a {}.'
  synthetic        the embedded dataset's prompts (its classes are drawn objects on a background)
  digits           handwritten digits, starting with CLIP's MNIST prompt

`config.eval.templates` picks one set for every eval set by name, or 'dataset' for each set's own default.
"""
from __future__ import annotations

from vlp_jax.registry import Registry

# OpenAI CLIP (MIT licence): the ImageNet prompts of its zero-shot notebook, in its order.
OPENAI_IMAGENET_TEMPLATES = (
    'a bad photo of a {}.', 'a photo of many {}.', 'a sculpture of a {}.', 'a photo of the hard to see {}.',
    'a low resolution photo of the {}.', 'a rendering of a {}.', 'graffiti of a {}.', 'a bad photo of the {}.',
    'a cropped photo of the {}.', 'a tattoo of a {}.', 'the embroidered {}.', 'a photo of a hard to see {}.',
    'a bright photo of a {}.', 'a photo of a clean {}.', 'a photo of a dirty {}.', 'a dark photo of the {}.',
    'a drawing of a {}.', 'a photo of my {}.', 'the plastic {}.', 'a photo of the cool {}.',
    'a close-up photo of a {}.', 'a black and white photo of the {}.', 'a painting of the {}.', 'a painting of a {}.',
    'a pixelated photo of the {}.', 'a sculpture of the {}.', 'a bright photo of the {}.', 'a cropped photo of a {}.',
    'a plastic {}.', 'a photo of the dirty {}.', 'a jpeg corrupted photo of a {}.', 'a blurry photo of the {}.',
    'a photo of the {}.', 'a good photo of the {}.', 'a rendering of the {}.', 'a {} in a video game.',
    'a photo of one {}.', 'a doodle of a {}.', 'a close-up photo of the {}.', 'a photo of a {}.', 'the origami {}.',
    'the {} in a video game.', 'a sketch of a {}.', 'a doodle of the {}.', 'a origami {}.',
    'a low resolution photo of a {}.', 'the toy {}.', 'a rendition of the {}.', 'a photo of the clean {}.',
    'a photo of a large {}.', 'a rendition of a {}.', 'a photo of a nice {}.', 'a photo of a weird {}.',
    'a blurry photo of a {}.', 'a cartoon {}.', 'art of a {}.', 'a sketch of the {}.', 'a embroidered {}.',
    'a pixelated photo of a {}.', 'itap of the {}.', 'a jpeg corrupted photo of the {}.', 'a good photo of a {}.',
    'a plushie {}.', 'a photo of the nice {}.', 'a photo of the small {}.', 'a photo of the weird {}.',
    'the cartoon {}.', 'art of the {}.', 'a drawing of the {}.', 'a photo of the large {}.',
    'a black and white photo of a {}.', 'the plushie {}.', 'a dark photo of a {}.', 'itap of a {}.',
    'graffiti of the {}.', 'a toy {}.', 'itap of my {}.', 'a photo of a cool {}.', 'a photo of a small {}.',
    'a tattoo of the {}.',
)
# OpenAI CLIP (MIT licence): the CIFAR-10 and CIFAR-100 prompts of its prompt-engineering notes.
CIFAR_TEMPLATES = (
    'a photo of a {}.', 'a blurry photo of a {}.', 'a black and white photo of a {}.', 'a low contrast photo of a {}.',
    'a high contrast photo of a {}.', 'a bad photo of a {}.', 'a good photo of a {}.', 'a photo of a small {}.',
    'a photo of a big {}.', 'a photo of the {}.', 'a blurry photo of the {}.', 'a black and white photo of the {}.',
    'a low contrast photo of the {}.', 'a high contrast photo of the {}.', 'a bad photo of the {}.',
    'a good photo of the {}.', 'a photo of the small {}.', 'a photo of the big {}.',
)
# OpenAI CLIP (MIT licence): the prompts of its zero-shot evaluation of Caltech-101, Oxford pets and flowers.
CALTECH101_TEMPLATES = (
    'a photo of a {}.', 'a painting of a {}.', 'a plastic {}.', 'a sculpture of a {}.', 'a sketch of a {}.',
    'a tattoo of a {}.', 'a toy {}.', 'a rendition of a {}.', 'a embroidered {}.', 'a cartoon {}.',
    'a {} in a video game.', 'a plushie {}.', 'a origami {}.', 'art of a {}.', 'graffiti of a {}.',
    'a drawing of a {}.', 'a doodle of a {}.', 'a photo of the {}.', 'a painting of the {}.', 'the plastic {}.',
    'a sculpture of the {}.', 'a sketch of the {}.', 'a tattoo of the {}.', 'the toy {}.', 'a rendition of the {}.',
    'the embroidered {}.', 'the cartoon {}.', 'the {} in a video game.', 'the plushie {}.', 'the origami {}.',
    'art of the {}.', 'graffiti of the {}.', 'a drawing of the {}.', 'a doodle of the {}.',
)
PETS_TEMPLATES = ('a photo of a {}, a type of pet.',)
FLOWERS_TEMPLATES = ('a photo of a {}, a type of flower.',)
SIMPLE_TEMPLATES = ('a photo of a {}.',)
SYNTHETIC_TEMPLATES = ('a photo of the {}.', 'a drawing of the {}.', 'the {}.', 'a picture of the {}.',
                       'the {} on a background.', 'an image showing the {}.')
DIGITS_TEMPLATES = ('a photo of the number: "{}".', 'a handwritten digit {}.', 'a photo of the number {}.',
                    'a blurry photo of the digit {}.', 'a low resolution image of the number {}.',
                    'the number {} written by hand.')

TEMPLATE_SETS: Registry[tuple[str, ...]] = Registry('template set', 'eval.templates')
for _name, _templates in (('openai_imagenet', OPENAI_IMAGENET_TEMPLATES), ('cifar', CIFAR_TEMPLATES),
                          ('simple', SIMPLE_TEMPLATES), ('caltech101', CALTECH101_TEMPLATES),
                          ('pets', PETS_TEMPLATES), ('flowers', FLOWERS_TEMPLATES),
                          ('synthetic', SYNTHETIC_TEMPLATES), ('digits', DIGITS_TEMPLATES)):
  TEMPLATE_SETS.add(_name, _templates)
# `config.eval.templates`: 'dataset' (each eval set's own templates) or a set above for every eval set.
CHOICES = ('dataset', *TEMPLATE_SETS)
