"""Reply chains for the depth tests and ``bench/chains.py``: each post replies to the previous one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal


def chain_posts(n: int, *, kept: Literal["all", "last"]) -> list[dict]:
    """``n`` posts, each replying to the previous; ``kept="all"``: every post is an on-topic prompt post,
    ``"last"``: only the deepest one is."""
    on_topic = 'Lumen-2 image generated, prompt: "a red fox in snow"'
    return [
        {
            "id": f"x:{i + 1}",
            "platform": "x",
            "url": f"https://x.com/u{i % 7}/status/{i + 1}",
            "author_id": str(i % 7),
            "author": f"u{i % 7}",
            "created_at": f"2025-06-{10 + i // 86400:02d}T{(i // 3600) % 24:02d}:{(i // 60) % 60:02d}:{i % 60:02d}Z",
            "text": on_topic if kept == "all" or i == n - 1 else "a reply about nothing",
            "reply_to_id": None if i == 0 else f"x:{i}",
        }
        for i in range(n)
    ]


def write_chain(path: Path, n: int, *, kept: Literal["all", "last"]) -> Path:
    """:func:`chain_posts` as JSON Lines (the package's own Post format) at ``path``."""
    path.write_text("".join(json.dumps(p) + "\n" for p in chain_posts(n, kept=kept)), encoding="utf-8")
    return path
