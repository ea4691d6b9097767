"""Draw the demo's images (run: ``python -m echo_builder.examples.demo.make_images``; outputs are committed).

Everything is drawn with Pillow from shapes, gradients and text, so the demo holds no third-party content and
the same Pillow build redraws the same bytes. Two folders are written next to this file:

- ``media/``: the images attached to the demo posts (``posts.json``), as a media server would serve them: the
  text-to-image outputs people shared, the photos they asked to edit (JPEG, as phones upload them) and the
  edited results, and one chart of an analysis post.
- ``outputs/<model>/<root post id>.png``: what three fictional models produced for each benchmark prompt.
  ``lumen-2`` (the model the posts are about) adds a warm/yellow cast to every edit, as users complain in the
  replies; ``nova-edit`` keeps the input's colors; ``pixelforge-1`` blurs and cools slightly. ``lumen-2``'s
  outputs are the images its users posted.

Sizes: 256x256 RGB, about 200 KB in all.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFilter, ImageFont

SIZE = 256
JPEG_QUALITY = 88
HERE = Path(__file__).resolve().parent

# root post ids of the benchmark threads in posts.json (the file names of the model outputs)
BOOKSHOP, POSTER, PORTRAIT, STREET, ROOM = (
    "1932000000000000101",
    "1932000000000000201",
    "1932000000000000301",
    "1932000000000000401",
    "1932000000000000501",
)
MODELS = ("lumen-2", "nova-edit", "pixelforge-1")


def _font(size: int) -> ImageFont.ImageFont | ImageFont.FreeTypeFont:
    return ImageFont.load_default(size=size)


def _vertical_gradient(top: tuple[int, int, int], bottom: tuple[int, int, int]) -> Image.Image:
    t = np.linspace(0.0, 1.0, SIZE)[:, None, None]
    rows = (1 - t) * np.array(top, float) + t * np.array(bottom, float)
    return Image.fromarray(np.repeat(rows, SIZE, axis=1).round().astype(np.uint8), "RGB")


def _centered_text(
    draw: ImageDraw.ImageDraw, box: tuple[int, int, int, int], text: str, size: int, fill
) -> None:
    font = _font(size)
    left, top, right, bottom = draw.textbbox((0, 0), text, font=font)
    x = (box[0] + box[2] - (right - left)) // 2 - left
    y = (box[1] + box[3] - (bottom - top)) // 2 - top
    draw.text((x, y), text, font=font, fill=fill)


# -- the looks of the three models ----------------------------------------------------------------------------------


def yellow_cast(img: Image.Image) -> Image.Image:
    """lumen-2's cast: red and green lifted a little, blue pulled down (the yellow tint users notice)."""
    a = np.asarray(img, dtype=np.float64)
    gain, offset = np.array([1.04, 1.0, 0.70]), np.array([10.0, 6.0, 0.0])
    return Image.fromarray(np.clip(a * gain + offset, 0, 255).round().astype(np.uint8), "RGB")


def soft_cool(img: Image.Image) -> Image.Image:
    """pixelforge-1's look: a slight blur and a small shift towards blue."""
    a = np.asarray(img.filter(ImageFilter.GaussianBlur(1.6)), dtype=np.float64)
    return Image.fromarray(np.clip(a + np.array([-4.0, 0.0, 7.0]), 0, 255).round().astype(np.uint8), "RGB")


# -- text-to-image scenes -------------------------------------------------------------------------------------------


def bookshop(sign: str) -> Image.Image:
    """A bookshop storefront at dusk in the rain, with a wooden sign reading ``sign``."""
    img = _vertical_gradient((52, 58, 110), (196, 120, 96))
    d = ImageDraw.Draw(img)
    d.rectangle((0, 196, 255, 255), fill=(62, 64, 74))  # wet street
    d.rectangle((28, 70, 228, 200), fill=(112, 74, 52))  # facade
    d.rectangle((44, 120, 136, 190), fill=(246, 196, 104))  # warm window
    d.rectangle((150, 118, 206, 200), fill=(86, 52, 36))  # door
    for x in range(52, 132, 14):  # book spines in the window
        d.rectangle((x, 160, x + 9, 188), fill=((x * 7) % 200 + 40, 90, (x * 3) % 160 + 60))
    d.rectangle((40, 78, 216, 110), fill=(150, 104, 62), outline=(70, 44, 28), width=3)  # sign
    _centered_text(d, (40, 78, 216, 110), sign, 20, (244, 232, 206))
    for i in range(40):  # rain
        x, y = (i * 53) % 256, (i * 97) % 190
        d.line((x, y, x - 4, y + 12), fill=(176, 186, 214), width=1)
    return img


def poster(title: str, *, flame: bool = False) -> Image.Image:
    """A retro travel poster for Mars: a red planet, a rocket (with its exhaust flame) and a title banner."""
    img = _vertical_gradient((28, 22, 64), (226, 128, 72))
    d = ImageDraw.Draw(img)
    d.ellipse((40, 60, 216, 236), fill=(192, 78, 46), outline=(120, 40, 26), width=4)
    d.ellipse((90, 110, 150, 150), fill=(160, 58, 36))
    d.polygon([(186, 40), (198, 70), (174, 70)], fill=(230, 230, 236))  # rocket
    d.rectangle((178, 70, 194, 110), fill=(214, 214, 224))
    if flame:
        d.polygon([(178, 110), (194, 110), (186, 134)], fill=(250, 190, 70))
    d.rectangle((12, 12, 244, 44), fill=(240, 214, 150))
    _centered_text(d, (12, 12, 244, 44), title, 17, (60, 30, 40))
    return img


# -- the photos people asked to edit, and the edits -----------------------------------------------------------------


def portrait(*, umbrella: bool = False, face_changed: bool = False) -> Image.Image:
    """A woman in a park (a drawn face: hair, eyes, nose, mouth), optionally holding a red umbrella."""
    img = _vertical_gradient((132, 176, 214), (96, 150, 90))
    d = ImageDraw.Draw(img)
    d.ellipse((-40, 170, 120, 300), fill=(70, 128, 66))  # bushes
    d.ellipse((150, 160, 310, 300), fill=(64, 118, 60))
    d.rectangle((86, 190, 170, 255), fill=(60, 84, 140))  # shoulders, blue top
    d.ellipse((78, 40, 178, 150), fill=(82, 52, 34))  # hair
    d.ellipse((92, 62, 164, 152), fill=(226, 184, 152))  # face
    d.rectangle((116, 146, 140, 196), fill=(214, 170, 140))  # neck
    eye = 5 if not face_changed else 8
    for cx in (112, 144):
        d.ellipse((cx - eye, 96 - eye // 2, cx + eye, 96 + eye // 2 + 1), fill=(250, 248, 244))
        d.ellipse((cx - 2, 94, cx + 2, 99), fill=(54, 40, 30))
    d.line((128, 104, 124, 120, 130, 121), fill=(176, 130, 106), width=2)  # nose
    if face_changed:  # a wider smile and a narrower chin: "it changed her face"
        d.arc((108, 118, 148, 142), 10, 170, fill=(170, 60, 70), width=3)
    else:
        d.line((118, 132, 138, 132), fill=(170, 70, 76), width=3)
    if umbrella:
        d.line((196, 90, 196, 220), fill=(60, 50, 46), width=3)
        d.pieslice((150, 52, 242, 132), 180, 360, fill=(206, 40, 48), outline=(120, 20, 26))
        d.ellipse((188, 212, 204, 226), fill=(214, 170, 140))  # hand
    return img


def street(*, car: bool = True) -> Image.Image:
    """A quiet street: houses, a pavement, a tree, and (optionally) a parked yellow-green car."""
    img = _vertical_gradient((150, 190, 226), (206, 222, 236))
    d = ImageDraw.Draw(img)
    d.rectangle((0, 180, 255, 255), fill=(104, 104, 110))  # road
    d.rectangle((0, 170, 255, 182), fill=(170, 166, 160))  # pavement
    for i, (x, colour) in enumerate(((10, (196, 110, 84)), (92, (222, 206, 170)), (174, (132, 152, 180)))):
        d.rectangle((x, 80 + 8 * i, x + 72, 170), fill=colour)
        d.polygon([(x - 6, 80 + 8 * i), (x + 36, 48 + 8 * i), (x + 78, 80 + 8 * i)], fill=(90, 70, 64))
        d.rectangle((x + 14, 110 + 8 * i, x + 30, 130 + 8 * i), fill=(232, 236, 240))
        d.rectangle((x + 44, 130, x + 58, 170), fill=(80, 60, 52))
    d.rectangle((236, 120, 244, 176), fill=(92, 70, 50))  # tree
    d.ellipse((214, 84, 256, 132), fill=(76, 138, 70))
    for x in range(8, 256, 40):
        d.rectangle((x, 216, x + 20, 220), fill=(226, 226, 220))  # lane marks
    if car:
        d.rounded_rectangle((60, 180, 190, 222), radius=10, fill=(150, 196, 60))
        d.rounded_rectangle((86, 160, 166, 188), radius=8, fill=(136, 180, 54))
        d.rectangle((94, 166, 158, 184), fill=(180, 206, 226))
        for cx in (88, 162):
            d.ellipse((cx - 14, 210, cx + 14, 238), fill=(36, 36, 40))
    return img


def room(*, sunset: bool = False) -> Image.Image:
    """A living room with a window, a sofa and a lamp; ``sunset`` lights it orange through the window."""
    wall = (214, 206, 190) if not sunset else (232, 170, 120)
    img = Image.new("RGB", (SIZE, SIZE), wall)
    d = ImageDraw.Draw(img)
    d.rectangle((0, 196, 255, 255), fill=(150, 112, 80) if not sunset else (160, 96, 60))  # floor
    sky = ((160, 200, 230), (140, 186, 220)) if not sunset else ((244, 140, 70), (200, 80, 90))
    d.rectangle((40, 34, 150, 130), fill=sky[0])
    d.rectangle((40, 82, 150, 130), fill=sky[1])
    d.rectangle((40, 34, 150, 130), outline=(246, 244, 238), width=5)
    d.line((95, 34, 95, 130), fill=(246, 244, 238), width=4)
    d.rounded_rectangle((30, 150, 190, 210), radius=12, fill=(70, 96, 120) if not sunset else (96, 80, 96))
    d.rectangle((40, 136, 180, 160), fill=(84, 112, 138) if not sunset else (112, 90, 104))
    d.line((220, 120, 220, 200), fill=(60, 56, 52), width=3)  # lamp
    d.polygon([(204, 120), (236, 120), (228, 96), (212, 96)], fill=(240, 226, 180))
    return img


def chart() -> Image.Image:
    """The analysis post's chart: share of 20 prompts each model got right, by category."""
    img = Image.new("RGB", (SIZE, SIZE), (244, 242, 236))
    d = ImageDraw.Draw(img)
    d.line((30, 220, 240, 220), fill=(40, 40, 40), width=2)
    d.line((30, 20, 30, 220), fill=(40, 40, 40), width=2)
    for i, (old, new) in enumerate(((9, 15), (6, 13), (11, 10), (4, 7))):
        x = 44 + 50 * i
        d.rectangle((x, 220 - old * 9, x + 16, 220), fill=(150, 150, 170))
        d.rectangle((x + 18, 220 - new * 9, x + 34, 220), fill=(226, 150, 60))
    _centered_text(d, (30, 226, 240, 250), "poster  text  hands  faces", 13, (40, 40, 40))
    return img


# -- what gets written ----------------------------------------------------------------------------------------------


def media_images() -> dict[str, Image.Image]:
    """File name (under ``media/``) -> image, for every image attached to a demo post."""
    return {
        "bookshop.png": bookshop("OPNE LATE"),
        "mars_poster.png": poster("VISIT OLYMPUS MONS"),
        "park_photo.jpg": portrait(),
        "park_edit.png": yellow_cast(portrait(umbrella=True, face_changed=True)),
        "street_photo.jpg": street(),
        "street_edit.png": yellow_cast(street(car=False)),
        "living_room.jpg": room(),
        "living_room_sunset.png": yellow_cast(room(sunset=True)),
        "comparison_chart.png": chart(),
    }


def model_outputs() -> dict[str, dict[str, Image.Image]]:
    """Model -> root post id -> its output for that benchmark prompt."""
    faithful: dict[str, Callable[[], Image.Image]] = {
        BOOKSHOP: lambda: bookshop("OPEN LATE"),
        POSTER: lambda: poster("VISIT OLYMPUS MONS", flame=True),
        PORTRAIT: lambda: portrait(umbrella=True),
        STREET: lambda: street(car=False),
        ROOM: lambda: room(sunset=True),
    }
    media = media_images()
    return {
        "lumen-2": {
            BOOKSHOP: media["bookshop.png"],
            POSTER: media["mars_poster.png"],
            PORTRAIT: media["park_edit.png"],
            STREET: media["street_edit.png"],
            ROOM: media["living_room_sunset.png"],
        },
        "nova-edit": {key: make() for key, make in faithful.items()},
        "pixelforge-1": {
            **{key: soft_cool(make()) for key, make in faithful.items()},
            BOOKSHOP: soft_cool(bookshop("OPEN LAET")),
        },
    }


def encode(img: Image.Image, suffix: str) -> bytes:
    """The bytes written for ``img`` as a ``.jpg`` (JPEG quality :data:`JPEG_QUALITY`) or ``.png`` file."""
    buffer = io.BytesIO()
    if suffix == ".jpg":
        img.save(buffer, format="JPEG", quality=JPEG_QUALITY, optimize=True)
    else:
        img.save(buffer, format="PNG", optimize=True)
    return buffer.getvalue()


def _save(img: Image.Image, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(encode(img, path.suffix))


def main() -> None:
    for name, img in media_images().items():
        _save(img, HERE / "media" / name)
    for model, images in model_outputs().items():
        for post_id, img in images.items():
            _save(img, HERE / "outputs" / model / f"{post_id}.png")


if __name__ == "__main__":
    main()
