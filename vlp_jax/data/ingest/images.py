"""Image preparation for the converter: an encoded image -> the bytes a record stores (`prepare_image`): the original
bytes when the training decoder reads them exactly, else correct RGB, upright by its EXIF orientation, shrunk to
--max_side and re-encoded."""
from __future__ import annotations

import contextlib
import io

from PIL import Image, ImageFile

from vlp_jax.data.storage import records

_KEPT_FORMATS = ('JPEG', 'PNG', 'WEBP')  # stored as they are when plain; everything else is re-encoded
_PLAIN_MODES = ('RGB', 'L', '1', 'P')  # modes whose PIL conversion to RGB is exact (P: when without transparency)
_LOSSY_FORMATS = ('JPEG', 'MPO', 'WEBP', 'JPEG2000')  # re-encoded as JPEG; other sources as PNG
_ORIENTATION_TAG = 0x0112
_UNDO_ORIENTATION = {2: Image.Transpose.FLIP_LEFT_RIGHT, 3: Image.Transpose.ROTATE_180,
                     4: Image.Transpose.FLIP_TOP_BOTTOM, 5: Image.Transpose.TRANSPOSE, 6: Image.Transpose.ROTATE_270,
                     7: Image.Transpose.TRANSVERSE, 8: Image.Transpose.ROTATE_90}


@contextlib.contextmanager
def _strict_pil():
  """PIL set up for checking images: truncated files fail, and its own bomb check is off (we apply --max_pixels from
  the header ourselves, so that a raised --max_pixels is honoured). Restored afterwards."""
  saved = Image.MAX_IMAGE_PIXELS, ImageFile.LOAD_TRUNCATED_IMAGES
  Image.MAX_IMAGE_PIXELS, ImageFile.LOAD_TRUNCATED_IMAGES = None, False
  try:
    yield
  finally:
    Image.MAX_IMAGE_PIXELS, ImageFile.LOAD_TRUNCATED_IMAGES = saved


def fit_size(width: int, height: int, max_side: int) -> tuple[int, int]:
  """(width, height) scaled so that the longer side is at most `max_side` (0: no limit), aspect kept, never up."""
  if not max_side or max(width, height) <= max_side:
    return width, height
  scale = max_side / max(width, height)
  return max(1, round(width * scale)), max(1, round(height * scale))


def _orientation(image: Image.Image) -> int:
  """The EXIF orientation (1 = upright; unreadable EXIF counts as upright)."""
  try:
    value = image.getexif().get(_ORIENTATION_TAG, 1)
  except Exception:  # pylint: disable=broad-except  # EXIF parsers raise many types on junk
    return 1
  return value if value in _UNDO_ORIENTATION else 1


def _is_plain(image: Image.Image, data: bytes) -> bool:
  """Whether the training decoder gets exactly the right RGB from these bytes with a plain PIL convert('RGB')."""
  if image.format not in _KEPT_FORMATS or image.mode not in _PLAIN_MODES or 'transparency' in image.info:
    return False
  return not (image.format == 'PNG' and data[24:25] == b'\x10')  # IHDR bit depth 16: store the 8-bit version


def _encode(image: Image.Image, lossless: bool) -> bytes:
  """A fresh RGB image (no ICC profile or EXIF of the source) -> PNG or JPEG quality 95 bytes."""
  buffer = io.BytesIO()
  if lossless:
    image.save(buffer, format='PNG')
  else:
    image.save(buffer, format='JPEG', quality=95)
  return buffer.getvalue()


def prepare_image(data: bytes, max_side: int = 0, max_pixels: int = records.DEFAULT_MAX_PIXELS) -> bytes:
  """Encoded image -> the bytes to store in a record.

  The same bytes when the image is a plain (see `_is_plain`) JPEG / PNG / WebP, upright, with a longer side within
  `max_side` (0: any). Otherwise the image is turned into correct RGB (records.to_rgb: alpha on white, 16-bit scaled),
  turned upright by its EXIF orientation, shrunk to `max_side` (bicubic) and re-encoded: as JPEG quality 95 when
  shrunk or from a lossy format, else as PNG. Raises records.BadRecordError with reason 'empty_image', 'too_large'
  (more than `max_pixels` pixels, 0: any; checked from the header) or 'corrupt_image' (undecodable or truncated).
  """
  if not data:
    raise records.BadRecordError('empty_image', 'the file has 0 bytes')
  with _strict_pil():
    try:
      image = Image.open(io.BytesIO(data))
    except Exception as error:  # pylint: disable=broad-except  # PIL raises many types on bad bytes
      raise records.BadRecordError('corrupt_image', f'{type(error).__name__}: {error}') from error
    with image:
      width, height = image.size
      if width * height == 0:
        raise records.BadRecordError('empty_image', f'the image is {width}x{height}')
      if max_pixels and width * height > max_pixels:
        raise records.BadRecordError('too_large', f'the image is {width}x{height}, more than {max_pixels} pixels')
      fitted, orientation = fit_size(width, height, max_side), _orientation(image)
      keep = fitted == (width, height) and orientation == 1 and _is_plain(image, data)
      try:
        if fitted != (width, height) and image.format == 'JPEG':
          image.draft(None, (2 * fitted[0], 2 * fitted[1]))  # decode at a reduced scale, like Image.thumbnail
        image.load()
        if keep:
          return data
        rgb = Image.fromarray(records.to_rgb(image))
      except Exception as error:  # pylint: disable=broad-except
        raise records.BadRecordError('corrupt_image', f'{type(error).__name__}: {error}') from error
      lossless = fitted == (width, height) and image.format not in _LOSSY_FORMATS
  if orientation != 1:
    rgb = rgb.transpose(_UNDO_ORIENTATION[orientation])
    if orientation >= 5:  # a quarter turn: the fitted size turns too
      fitted = fitted[::-1]
  if rgb.size != fitted:
    rgb = rgb.resize(fitted, Image.Resampling.BICUBIC)
  return _encode(rgb, lossless)
