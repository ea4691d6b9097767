"""One of several processes sharing a call cache directory, for the cache's concurrency test.

Usage: ``python -m tests.helpers.cache_worker NAME OTHER N``. Prints ``ready``; then for each line read from standard
input (a cache directory, the same for every worker of a round) it opens :class:`~echo_builder.cache.CallCache`
there, stores ``N`` entries ``NAME-<i>`` whose values carry their own SHA-256, reads the entries of worker ``OTHER``
as they appear, and prints one JSON line: ``{"read": ..., "torn": ...}`` (entries read whose content does not match
its hash), or ``{"error": "..."}`` when the cache raised.
"""

from __future__ import annotations

import hashlib
import json
import sys

from echo_builder.cache import CallCache


def _round(directory: str, name: str, other: str, n: int) -> dict[str, object]:
    cache = CallCache(directory)
    read = torn = 0
    try:
        for i in range(n):
            body = f"{name}-{i}-" * (500 + 37 * i)  # tens of kB: a write spans several pages
            cache.put(
                f"{name}-{i}",
                {"body": body, "sha256": hashlib.sha256(body.encode()).hexdigest()},
                backend="b",
                stage="s",
            )
            for j in range(i + 1):
                value = cache.get(f"{other}-{j}", backend="b")
                if value is not None:
                    read += 1
                    torn += hashlib.sha256(value["body"].encode()).hexdigest() != value["sha256"]
            cache.flush_counters()
    finally:
        cache.close()
    return {"read": read, "torn": torn}


def main() -> None:
    name, other, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    print("ready", flush=True)
    for line in sys.stdin:
        try:
            result = _round(line.strip(), name, other, n)
        except Exception as exc:  # reported to the test, which fails on it
            result = {"error": f"{type(exc).__name__}: {exc}"}
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
