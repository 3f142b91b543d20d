"""vlp_jax/training/event_file.py: TensorBoard event files written without tensorboardX, read back here with
tensorboardX's Event proto and CRC code (support.tensorboard_events) as the independent reference."""
import io

import numpy as np
import pytest
from PIL import Image

from support import tensorboard_events
from vlp_jax.training import event_file, writer


def test_crc32c_of_the_standard_check_string():
  # the check value of CRC-32C (RFC 3720, appendix B.4)
  assert event_file.crc32c(b'123456789') == 0xE3069283
  assert event_file.crc32c(b'') == 0


@pytest.mark.parametrize('value', [0, 1, 127, 128, 300, 2**31 + 5, 2**63 - 1])
def test_varints_decode_to_what_was_written(value):
  encoded = event_file._varint(value)
  decoded = sum((byte & 0x7F) << (7 * i) for i, byte in enumerate(encoded))
  assert decoded == value and all(b & 0x80 for b in encoded[:-1]) and not encoded[-1] & 0x80


def test_scalars_and_images_read_back_with_tensorboards_proto(tmp_path):
  rgba = np.random.default_rng(0).integers(0, 256, (5, 7, 4), dtype=np.uint8)
  buffer = io.BytesIO()
  Image.fromarray(rgba, 'RGBA').save(buffer, format='PNG')
  events = event_file.EventFileWriter(str(tmp_path))
  events.write(event_file.scalar_event(1234.5, 3, 'train/loss', 2.25))
  events.write(event_file.scalar_event(1235.0, 2**40, 'eval/zeroshot/top1', -0.1))
  events.write(event_file.image_event(1236.0, 7, 'plots/curves', buffer.getvalue(), 5, 7, 4))
  events.close()
  version, first, second, image = tensorboard_events(str(tmp_path))  # CRCs checked there
  assert version.file_version == 'brain.Event:2'
  assert (first.wall_time, first.step, first.summary.value[0].tag) == (1234.5, 3, 'train/loss')
  assert first.summary.value[0].simple_value == 2.25
  assert (second.step, second.summary.value[0].simple_value) == (2**40, np.float32(-0.1))
  value = image.summary.value[0]
  assert (image.step, value.tag, value.image.height, value.image.width, value.image.colorspace) == (
      7, 'plots/curves', 5, 7, 4)
  np.testing.assert_array_equal(np.asarray(Image.open(io.BytesIO(value.image.encoded_image_string))), rgba)


def test_an_image_tensorboard_cannot_show_as_it_is_becomes_an_rgb_png(tmp_path):
  path = str(tmp_path / 'palette.png')
  Image.fromarray(np.arange(12, dtype=np.uint8).reshape(3, 4)).convert('P').save(path)
  png, size, channels = writer.png_for_tensorboard(path)
  assert (size, channels) == ((4, 3), 3) and Image.open(io.BytesIO(png)).mode == 'RGB'
  grey = str(tmp_path / 'grey.png')
  Image.fromarray(np.arange(12, dtype=np.uint8).reshape(3, 4)).save(grey)
  assert writer.png_for_tensorboard(grey) == (open(grey, 'rb').read(), (4, 3), 1)
