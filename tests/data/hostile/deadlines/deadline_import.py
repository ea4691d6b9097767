"""A plugin module whose import never returns (it waits on an event nobody sets, as a module stuck on a lock or
a network call at import time would)."""

import threading

threading.Event().wait()
METRIC = None
