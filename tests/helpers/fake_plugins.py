"""Fake installed distributions for plugin tests: ``NAME-0.1.dist-info`` (``METADATA``, ``entry_points.txt``) and
the plugin's modules in a folder put first on ``sys.path``, found by ``importlib.metadata`` like a pip-installed
package; :meth:`FakeSite.close` removes them and makes every registry read its entry points again."""

from __future__ import annotations

import importlib
import sys
import textwrap
from pathlib import Path

from echo_builder.registry import reload_plugins


class FakeSite:
    """A ``site-packages`` stand-in at ``root``; no bytecode is written next to its modules while it is open."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.root.mkdir(parents=True, exist_ok=True)
        self.modules: list[str] = []
        self._bytecode = sys.dont_write_bytecode
        sys.dont_write_bytecode = True
        sys.path.insert(0, str(root))

    def install(self, dist: str, entry_points: dict[str, dict[str, str]], modules: dict[str, str]) -> None:
        """``entry_points``: group -> entry-point name -> ``module:attribute``; ``modules``: name -> source."""
        info = self.root / f"{dist}-0.1.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n")
        text = "".join(
            f"[{group}]\n" + "".join(f"{name} = {target}\n" for name, target in points.items())
            for group, points in entry_points.items()
        )
        (info / "entry_points.txt").write_text(text)
        for module, source in modules.items():
            (self.root / f"{module}.py").write_text(textwrap.dedent(source))
            self.modules.append(module)
            sys.modules.pop(module, None)
        importlib.invalidate_caches()
        reload_plugins()

    def close(self) -> None:
        if str(self.root) in sys.path:
            sys.path.remove(str(self.root))
        for module in self.modules:
            sys.modules.pop(module, None)
        sys.dont_write_bytecode = self._bytecode
        importlib.invalidate_caches()
        reload_plugins()
