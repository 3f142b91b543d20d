"""TensorBoard event files, written directly: the TFRecord framing (each record: its length as a little-endian
uint64, that length's masked CRC-32C, the bytes, their masked CRC-32C) around `Event` protos, encoded by hand for
the three kinds the trainer writes (the file version, a scalar, a PNG image).

The trainer used tensorboardX for this, whose import pulls in torch wherever torch is installed (2 s of CPU per
training process); the fields below are those of TensorBoard's event.proto and summary.proto:
  Event:   wall_time = 1 (double), step = 2 (int64), file_version = 3 (string), summary = 5 (Summary)
  Summary: value = 1 (repeated Value)
  Value:   tag = 1 (string), simple_value = 2 (float), image = 4 (Image)
  Image:   height = 1, width = 2, colorspace = 3 (int32), encoded_image_string = 4 (bytes)
"""
from __future__ import annotations

import os
import socket
import struct
import time

from vlp_jax import paths

_CASTAGNOLI = 0x82F63B78  # CRC-32C's polynomial, bit-reversed


def _crc_table() -> tuple[int, ...]:
  table = []
  for byte in range(256):
    crc = byte
    for _ in range(8):
      crc = (crc >> 1) ^ _CASTAGNOLI if crc & 1 else crc >> 1
    table.append(crc)
  return tuple(table)


_TABLE = _crc_table()


def crc32c(data: bytes) -> int:
  """CRC-32C (Castagnoli) of `data`, as TFRecord files check their records."""
  crc = 0xFFFFFFFF
  for byte in data:
    crc = _TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
  return crc ^ 0xFFFFFFFF


def masked_crc32c(data: bytes) -> int:
  """The CRC as TFRecord stores it: rotated right by 15 bits plus a constant (a CRC of data with CRCs inside is
  then not degenerate)."""
  crc = crc32c(data)
  return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def tfrecord(data: bytes) -> bytes:
  """One TFRecord: length, its masked CRC, `data`, its masked CRC."""
  length = struct.pack('<Q', len(data))
  return length + struct.pack('<I', masked_crc32c(length)) + data + struct.pack('<I', masked_crc32c(data))


def _varint(value: int) -> bytes:
  """A non-negative integer as a protobuf varint: 7 bits per byte, low bits first, the high bit saying 'more'."""
  out = bytearray()
  while True:
    low, value = value & 0x7F, value >> 7
    out.append(low | (0x80 if value else 0))
    if not value:
      return bytes(out)


def _bytes_field(number: int, payload: bytes) -> bytes:
  """A length-delimited field (wire type 2): strings, bytes, messages."""
  return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _int_field(number: int, value: int) -> bytes:
  """A varint field (wire type 0)."""
  return _varint(number << 3) + _varint(value)


def _event(wall_time: float, step: int, what: bytes) -> bytes:
  """An Event: its time (field 1, a double: wire type 1), its step and `what` (an encoded file_version or summary
  field)."""
  return _varint(1 << 3 | 1) + struct.pack('<d', wall_time) + _int_field(2, step) + what


def version_event(wall_time: float) -> bytes:
  """The first event of every file: which event format follows."""
  return _event(wall_time, 0, _bytes_field(3, b'brain.Event:2'))


def scalar_event(wall_time: float, step: int, tag: str, value: float) -> bytes:
  """A Summary with one scalar (simple_value, a float32: wire type 5)."""
  summary_value = _bytes_field(1, tag.encode()) + _varint(2 << 3 | 5) + struct.pack('<f', value)
  return _event(wall_time, step, _bytes_field(5, _bytes_field(1, summary_value)))


def image_event(wall_time: float, step: int, tag: str, png: bytes, height: int, width: int, channels: int) -> bytes:
  """A Summary with one image, its encoded PNG as it is (channels: 1 grey, 3 RGB, 4 RGBA: TensorBoard's
  colorspace)."""
  image = _int_field(1, height) + _int_field(2, width) + _int_field(3, channels) + _bytes_field(4, png)
  summary_value = _bytes_field(1, tag.encode()) + _bytes_field(4, image)
  return _event(wall_time, step, _bytes_field(5, _bytes_field(1, summary_value)))


# On an object store a file is rewritten whole at each flush: past this size the writer starts a new file (TensorBoard
# reads every event file in the folder), so that a long run does not upload an ever larger object.
REMOTE_FILE_BYTES = 4 << 20


class EventFileWriter:
  """Appends events to a new `events.out.tfevents.<time>.<host>.<pid>` file in `logdir`. Locally each record is
  flushed as it is written (a crash loses none of them); on an object store (`gs://`), which cannot append, the
  records reach the bucket at each `flush` (`paths.AppendableFile`), and a new file is started past
  REMOTE_FILE_BYTES."""

  def __init__(self, logdir: str):
    paths.makedirs(logdir)
    self.logdir = logdir
    self._files_started = 0
    self._file = self._new_file()

  def _new_file(self) -> paths.AppendableFile:
    now = time.time()
    suffix = f'.{self._files_started}' if self._files_started else ''  # names stay unique within a second
    self._files_started += 1
    self.path = paths.join(
        self.logdir, f'events.out.tfevents.{int(now):010d}.{socket.gethostname()}.{os.getpid()}{suffix}')
    file = paths.AppendableFile(self.path)
    file.write(tfrecord(version_event(now)))
    return file

  def write(self, event: bytes) -> None:
    self._file.write(tfrecord(event))

  def flush(self) -> None:
    """Send the records written since the last flush (an object store; locally they are already on disk)."""
    self._file.flush()
    if self._file.size > REMOTE_FILE_BYTES:
      self._file.close()
      self._file = self._new_file()

  def close(self) -> None:
    self._file.close()
