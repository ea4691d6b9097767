"""Run N cached ``openai:`` calls against a base URL; used by tests that SIGKILL it halfway.

Usage: python -m tests.helpers.call_worker BASE_URL CACHE_DIR N CONCURRENCY
"""

from __future__ import annotations

import sys

from echo_builder.backends import GenerationParams, create_backend, user_message
from echo_builder.backends.caller import CallRequest, ModelCaller, RetryPolicy
from echo_builder.cache import CallCache


def requests(n: int) -> list[CallRequest]:
    return [
        CallRequest((user_message(f"question {i}"),), GenerationParams(max_tokens=16), stage="kill")
        for i in range(n)
    ]


def main() -> None:
    base_url, cache_dir, n, concurrency = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    backend = create_backend("openai:judge-model", base_url=base_url, timeout_s=10)
    cache = CallCache(cache_dir)
    caller = ModelCaller(
        backend, cache=cache, concurrency=concurrency, retry=RetryPolicy(initial_backoff_s=0.01)
    )
    results = caller.call_many(requests(n))
    cache.close()
    print(f"ok={sum(r.ok for r in results)} cached={sum(r.cached for r in results)}", flush=True)


if __name__ == "__main__":
    main()
