"""Frame identity: (episode, frame, camera) drawn as black/white cells that survive lossy coding.

Layout (a pure function of the image size, so a reader needs nothing but the image):
40 square cells of ``cell`` pixels (8, or 16 once both sides reach 192), row-major from the
top-left corner, ``columns = width // cell`` per row. Cells sit on the codec's 8-pixel block grid
and are pure luma (black = 0 %, white = 100 %, neutral chroma), so AV1 at crf 30 keeps them
readable even at 64x48. The 40 bits, most significant first:

    episode (14 bits) | frame (14 bits) | camera (4 bits) | CRC-8 of those 32 bits (poly 0x07)

A reader averages the inner part of each cell (a quarter of the cell is dropped at each edge, so
ringing at cell borders does not count), calls it black below 30 % grey and white above 70 %;
anything in between, or a CRC mismatch, is an unreadable pattern, never a wrong answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from episodestream.errors import ConfigError, DatasetFormatError

__all__ = [
    "IDENTITY_BITS",
    "MAX_CAMERAS",
    "MAX_EPISODES",
    "MAX_FRAMES_PER_EPISODE",
    "IdentityLayout",
    "identity_cells",
    "identity_layout",
    "read_frame_camera",
    "read_frame_identity",
]

_EPISODE_BITS = 14
_FRAME_BITS = 14
_CAMERA_BITS = 4
_CRC_BITS = 8
_PAYLOAD_BITS = _EPISODE_BITS + _FRAME_BITS + _CAMERA_BITS
IDENTITY_BITS = _PAYLOAD_BITS + _CRC_BITS

MAX_EPISODES = 1 << _EPISODE_BITS
MAX_FRAMES_PER_EPISODE = 1 << _FRAME_BITS
MAX_CAMERAS = 1 << _CAMERA_BITS

# grey levels (fractions of full scale) that separate a clear black or white cell from noise
_BLACK_BELOW = 0.30
_WHITE_ABOVE = 0.70


@dataclass(frozen=True, slots=True)
class IdentityLayout:
    """Where the identity cells lie in a ``width`` x ``height`` image."""

    width: int
    height: int
    cell: int
    columns: int
    rows: int

    def cell_origin(self, bit: int) -> tuple[int, int]:
        """Top-left pixel ``(y, x)`` of the cell holding ``bit`` (0 = most significant)."""
        row, column = divmod(bit, self.columns)
        return row * self.cell, column * self.cell


def identity_layout(width: int, height: int) -> IdentityLayout:
    """The cell layout for an image size.

    Raises:
        ConfigError: (a ValueError) the image is too small to hold the 40 cells.
    """
    cell = 16 if min(width, height) >= 192 else 8
    columns = width // cell
    if columns == 0:
        raise ConfigError(f"image {width}x{height} is too narrow for {cell}-pixel identity cells")
    rows = -(-IDENTITY_BITS // columns)
    if rows * cell > height:
        raise ConfigError(
            f"image {width}x{height} cannot hold the {IDENTITY_BITS} identity cells of "
            f"{cell}x{cell} pixels ({columns} per row needs {rows * cell} rows of pixels); "
            "use at least 64x48"
        )
    return IdentityLayout(width=width, height=height, cell=cell, columns=columns, rows=rows)


def _crc8(payload: int) -> int:
    """CRC-8 (polynomial x^8 + x^2 + x + 1) of the 32-bit payload, big-endian bytes."""
    crc = 0
    for byte in payload.to_bytes(4, "big"):
        crc ^= byte
        for _ in range(8):
            crc = ((crc << 1) ^ 0x07) & 0xFF if crc & 0x80 else (crc << 1) & 0xFF
    return crc


def _encode_bits(episode: int, frame: int, camera: int) -> np.ndarray:
    if not 0 <= episode < MAX_EPISODES:
        raise ConfigError(f"episode {episode} outside [0, {MAX_EPISODES})")
    if not 0 <= frame < MAX_FRAMES_PER_EPISODE:
        raise ConfigError(f"frame {frame} outside [0, {MAX_FRAMES_PER_EPISODE})")
    if not 0 <= camera < MAX_CAMERAS:
        raise ConfigError(f"camera {camera} outside [0, {MAX_CAMERAS})")
    payload = (episode << (_FRAME_BITS + _CAMERA_BITS)) | (frame << _CAMERA_BITS) | camera
    word = (payload << _CRC_BITS) | _crc8(payload)
    shifts = np.arange(IDENTITY_BITS - 1, -1, -1, dtype=np.uint64)
    return ((np.uint64(word) >> shifts) & np.uint64(1)).astype(bool)


def identity_cells(
    layout: IdentityLayout, episode: int, frame: int, camera: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """Masks ``(covered, white)``, each bool ``(height, width)``: pixels the pattern owns, and
    which of those are white. Writers paint covered pixels black or white at neutral chroma."""
    bits = _encode_bits(episode, frame, camera)
    covered = np.zeros((layout.height, layout.width), dtype=bool)
    white = np.zeros_like(covered)
    c = layout.cell
    for bit, value in enumerate(bits):
        y, x = layout.cell_origin(bit)
        covered[y : y + c, x : x + c] = True
        if value:
            white[y : y + c, x : x + c] = True
    return covered, white


def _as_grey(image: Any) -> np.ndarray:
    """A float ``(H, W)`` grey image in [0, 1] from HWC/CHW/HW numpy arrays or torch tensors."""
    if hasattr(image, "detach") and hasattr(image, "cpu"):  # a torch tensor; torch stays optional
        image = image.detach().cpu().numpy()
    array = np.asarray(image)
    if array.dtype == np.uint8:
        scale = 1.0 / 255.0
    elif np.issubdtype(array.dtype, np.floating):
        scale = 1.0  # LeRobot hands out float32 in [0, 1]
    else:
        raise ConfigError(f"expected uint8 or float pixels in [0, 1], got dtype {array.dtype}")
    if array.ndim == 3:
        if array.shape[-1] in (1, 3) and array.shape[0] not in (1, 3):
            channel_axis = -1
        elif array.shape[0] in (1, 3):
            channel_axis = 0
        else:
            raise ConfigError(
                f"image of shape {array.shape} is neither HWC nor CHW with 1 or 3 channels"
            )
        return array.mean(axis=channel_axis, dtype=np.float64) * scale
    if array.ndim != 2:
        raise ConfigError(f"expected one image (HW, HWC or CHW), got shape {array.shape}")
    return array.astype(np.float64) * scale


def _read_word(image: Any) -> tuple[int, int, int]:
    grey = _as_grey(image)
    height, width = grey.shape
    layout = identity_layout(width, height)
    c = layout.cell
    margin = c // 4
    levels = np.empty(IDENTITY_BITS, dtype=np.float64)
    for bit in range(IDENTITY_BITS):
        y, x = layout.cell_origin(bit)
        levels[bit] = grey[y + margin : y + c - margin, x + margin : x + c - margin].mean()
    unclear = np.flatnonzero((levels >= _BLACK_BELOW) & (levels <= _WHITE_ABOVE))
    if unclear.size:
        raise DatasetFormatError(
            f"frame identity pattern unreadable in {width}x{height} image: {unclear.size} of "
            f"{IDENTITY_BITS} cells neither black nor white (cell {int(unclear[0])} grey level "
            f"{levels[unclear[0]]:.2f}); is this a synthetic episodestream frame?"
        )
    word = 0
    for value in levels > _WHITE_ABOVE:
        word = (word << 1) | int(value)
    payload, crc = word >> _CRC_BITS, word & 0xFF
    if _crc8(payload) != crc:
        raise DatasetFormatError(
            f"frame identity pattern in {width}x{height} image fails its checksum "
            f"(read {word:#012x}); the image is not an intact synthetic frame"
        )
    episode = payload >> (_FRAME_BITS + _CAMERA_BITS)
    frame = (payload >> _CAMERA_BITS) & (MAX_FRAMES_PER_EPISODE - 1)
    camera = payload & (MAX_CAMERAS - 1)
    return episode, frame, camera


def read_frame_identity(image: Any) -> tuple[int, int]:
    """Read ``(episode_index, frame_index)`` back from a synthetic frame.

    Args:
        image: one decoded frame, HWC or CHW (or HW grey), as a numpy array or torch tensor,
            uint8 or float in [0, 1].

    Raises:
        DatasetFormatError: the pattern is unreadable or fails its checksum.
        ConfigError: (a ValueError) the array is not one image of a supported shape, dtype
            or size.
    """
    episode, frame, _camera = _read_word(image)
    return episode, frame


def read_frame_camera(image: Any) -> int:
    """Read the camera's position in ``SyntheticSpec.cameras`` back from a synthetic frame.

    Raises the same errors as :func:`read_frame_identity`.
    """
    return _read_word(image)[2]
