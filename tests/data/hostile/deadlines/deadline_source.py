"""A plugin source format that reads {"slow_export": [texts]} and never returns from the record "hang"."""

import threading

from echo_builder.records import Post
from echo_builder.sources import SourceAdapter


class SlowExport(SourceAdapter):
    name = "slow_export"

    def sniff(self, value):
        return isinstance(value, dict) and "slow_export" in value

    def parse_document(self, document, ctx):
        for i, text in enumerate(document.value["slow_export"]):
            if text == "hang":
                threading.Event().wait()
            yield Post(id=f"web:{i}", platform="web", text=text)
