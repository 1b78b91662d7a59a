"""engine/vision/image_input.py and image_store.py on real image files made here with Pillow: each bad input of issue
44 is one line or a correct conversion, checked pixel by pixel where it converts."""

from __future__ import annotations

import base64
import io
import struct
import zlib

import numpy as np
import pytest
from PIL import Image

from engine.errors import ImageError
from engine.vision import image_store
from engine.vision.image_input import ImageLimits, decode_data_url, read_image, read_image_file


def _save(picture: Image.Image, fmt: str, **options) -> bytes:
    buffer = io.BytesIO()
    picture.save(buffer, fmt, **options)
    return buffer.getvalue()


def _one_line(exc: pytest.ExceptionInfo) -> str:
    text = str(exc.value)
    assert "\n" not in text and "Traceback" not in text
    return text


def test_a_plain_png_is_taken_as_it_is():
    pixels = np.random.default_rng(0).integers(0, 256, (30, 40, 3), dtype=np.uint8)
    data = _save(Image.fromarray(pixels), "PNG")
    image = read_image(data, "shot.png")
    assert (image.format, image.width, image.height, image.frames, image.note) == ("png", 40, 30, 1, "")
    assert np.array_equal(np.asarray(image.rgb), pixels) and image.sha256 == image_store.address(data)


def test_transparency_is_laid_on_white():
    rgba = np.zeros((2, 2, 4), dtype=np.uint8)
    rgba[0, 0] = (255, 0, 0, 255)  # opaque red stays red
    rgba[1, 1] = (0, 0, 255, 0)  # fully transparent blue becomes white
    image = read_image(_save(Image.fromarray(rgba, "RGBA"), "PNG"), "icon.png")
    out = np.asarray(image.rgb)
    assert tuple(out[0, 0]) == (255, 0, 0) and tuple(out[1, 1]) == (255, 255, 255)
    assert "white" in image.note


def test_cmyk_jpeg_is_converted_to_rgb():
    data = _save(Image.new("CMYK", (8, 8), (0, 255, 255, 0)), "JPEG", quality=95)  # pure red in CMYK
    image = read_image(data, "print.jpg")
    assert image.rgb.mode == "RGB" and "CMYK" in image.note
    red, green, blue = np.asarray(image.rgb)[4, 4].astype(int)
    assert red > 240 and green < 20 and blue < 20


def test_sixteen_bit_greyscale_is_scaled_not_clipped():
    values = np.array([[0, 256, 32768, 65535]], dtype=np.uint16)
    image = read_image(_save(Image.fromarray(values), "PNG"), "scan.png")
    assert list(np.asarray(image.rgb)[0, :, 0]) == [0, 1, 128, 255]  # Pillow's own convert gives 0, 255, 255, 255
    assert "16-bit" in image.note


def test_the_first_frame_of_an_animated_gif_is_used_and_said():
    frames = [Image.new("RGB", (6, 6), colour) for colour in ((255, 0, 0), (0, 255, 0), (0, 0, 255))]
    data = _save(frames[0], "GIF", save_all=True, append_images=frames[1:], duration=100, loop=0)
    image = read_image(data, "spin.gif")
    assert image.frames == 3 and "first of its 3 frames" in image.note
    assert tuple(np.asarray(image.rgb)[0, 0]) == (255, 0, 0)


def test_exif_orientation_turns_the_photo_upright():
    pixels = np.zeros((20, 40, 3), dtype=np.uint8)  # stored landscape: 40 wide, 20 high, left half white
    pixels[:, :20] = 255
    exif = Image.Exif()
    exif[0x0112] = 6  # "rotate 90° clockwise to view"
    image = read_image(_save(Image.fromarray(pixels), "JPEG", exif=exif, quality=95), "phone.jpg")
    assert (image.width, image.height) == (20, 40) and "EXIF" in image.note
    out = np.asarray(image.rgb).astype(int)
    assert out[5, 10].mean() > 200 and out[35, 10].mean() < 50  # the white half is now on top


def _png_with_size(width: int, height: int) -> bytes:
    """A 1×1 PNG whose header then claims ``width`` × ``height``: a few dozen bytes that decode to gigabytes."""
    data = bytearray(_save(Image.new("L", (1, 1)), "PNG"))
    header = struct.pack(">II", width, height) + bytes(data[24:29])
    data[16:29] = header
    data[29:33] = struct.pack(">I", zlib.crc32(b"IHDR" + header) & 0xFFFFFFFF)
    return bytes(data)


def test_a_20000_pixel_square_is_refused_from_its_header():
    with pytest.raises(ImageError) as caught:
        read_image(_png_with_size(20_000, 20_000), "huge.png")
    text = _one_line(caught)
    assert "huge.png" in text and "400,000,000 pixels" in text and "decompression bomb" in text
    with pytest.raises(ImageError) as caught:  # under Pillow's own bomb limit: ours, from the header
        read_image(_png_with_size(9_000, 9_000), "big.png")
    assert "9,000 × 9,000" in _one_line(caught) and "decompression bomb" in str(caught.value)


def test_a_big_but_honest_image_is_called_too_large():
    with pytest.raises(ImageError) as caught:
        read_image(_save(Image.new("RGB", (300, 200)), "BMP"), "wide.bmp", ImageLimits(max_pixels=10_000))
    assert "too large" in _one_line(caught)


def test_a_truncated_file_is_one_line():
    data = _save(Image.fromarray(np.random.default_rng(1).integers(0, 256, (64, 64, 3), dtype=np.uint8)), "PNG")
    with pytest.raises(ImageError) as caught:
        read_image(data[: len(data) // 2], "cut.png")
    assert "truncated or damaged" in _one_line(caught)


def test_text_named_png_and_other_non_images(tmp_path):
    fake = tmp_path / "notes.png"
    fake.write_text("not an image, just notes\n", encoding="utf-8")
    with pytest.raises(ImageError) as caught:
        read_image_file(fake)
    assert "notes.png" in _one_line(caught) and "text" in str(caught.value)
    with pytest.raises(ImageError) as caught:
        read_image(b"%PDF-1.7\n...", "scan.png")
    assert "PDF" in _one_line(caught)
    with pytest.raises(ImageError):
        read_image(b"", "empty.png")
    with pytest.raises(ImageError) as caught:
        read_image_file(tmp_path / "gone.png")
    assert "gone" in _one_line(caught)
    with pytest.raises(ImageError) as caught:
        read_image(_save(Image.new("RGB", (2, 2)), "TIFF"), "scan.tiff")  # a format outside the list
    assert "PNG, JPEG" in _one_line(caught)


def test_data_urls():
    data = _save(Image.new("RGB", (3, 3), (1, 2, 3)), "PNG")
    url = "data:image/png;base64," + base64.b64encode(data).decode()
    assert decode_data_url(url) == data
    for bad, says in (("https://example.com/a.png", "data: URL"), ("data:text/plain;base64,aGk=", "text/plain"),
                      ("data:image/png,rawbytes", "base64"), ("data:image/png;base64,@@@", "invalid")):
        with pytest.raises(ImageError) as caught:
            decode_data_url(bad)
        assert says in _one_line(caught)
    with pytest.raises(ImageError) as caught:
        decode_data_url("data:image/png;base64," + "A" * 200, ImageLimits(max_bytes=100))
    assert "over" in _one_line(caught)


def test_the_store_is_content_addressed_and_checks_what_it_reads(tmp_path):
    data = _save(Image.new("RGB", (4, 4), (9, 9, 9)), "PNG")
    path = image_store.put(data, "png", tmp_path)
    sha = image_store.address(data)
    assert path == tmp_path / sha[:2] / f"{sha}.png" and path.read_bytes() == data
    assert image_store.put(data, "png", tmp_path) == path  # the same bytes: one file
    assert image_store.get(sha, "png", tmp_path) == data
    path.write_bytes(data[:-1] + b"\x00")
    with pytest.raises(ImageError) as caught:
        image_store.get(sha, "png", tmp_path)
    assert "changed on disk" in _one_line(caught)
    for bad in ("../../etc/passwd", "A" * 64):
        with pytest.raises(ImageError):
            image_store.path_for(bad, "png", tmp_path)
    with pytest.raises(ImageError):
        image_store.path_for(sha, "exe", tmp_path)
