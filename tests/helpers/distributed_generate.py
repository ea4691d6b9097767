"""Generate with the ``transformers:`` backend; run under ``accelerate launch`` by the multi-process test.

Usage: python -m tests.helpers.distributed_generate MODEL_DIR OUT_JSON
Every process builds the same 7 conversations; the main process writes the gathered replies as JSON.
"""

from __future__ import annotations

import json
import sys

from PIL import Image

from echo_builder.backends import GenerationParams, create_backend, user_message


def conversations() -> list:
    convs = []
    for i in range(7):
        parts = [f"prompt number {i}: rate this"]
        if i % 2 == 0:
            parts.insert(0, Image.new("RGB", (40 + 8 * i, 56), (30 * i, 100, 200 - 20 * i)))
        convs.append(([user_message(*parts)], GenerationParams(max_tokens=6)))
    return convs


def main() -> None:
    from echo_builder.backends.transformers_backend import _partial_state

    model_dir, out = sys.argv[1], sys.argv[2]
    backend = create_backend(f"transformers:{model_dir}", batch_size=2, dtype="float32")
    replies = backend.generate_batch(conversations())
    state = _partial_state()
    if state.is_main_process:
        with open(out, "w") as f:
            json.dump({"processes": state.num_processes, "texts": [r.text for r in replies]}, f)


if __name__ == "__main__":
    main()
