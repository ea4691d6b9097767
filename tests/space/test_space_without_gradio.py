"""``python spaces_app/app.py`` without gradio (a core install): one ``error:`` line with the install command."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.conftest import REPO_ROOT

# Runs app.py as ``python spaces_app/app.py`` does, with gradio made unimportable (``sys.modules`` entry None).
_RUN_WITHOUT_GRADIO = (
    "import runpy, sys; sys.modules['gradio'] = None; sys.argv = ['app.py'] + sys.argv[1:]; "
    "runpy.run_path({app!r}, run_name='__main__')"
)


def _run_app(*args: str) -> subprocess.CompletedProcess:
    app = str(REPO_ROOT / "spaces_app" / "app.py")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "GRADIO_ANALYTICS_ENABLED": "False"}
    for name in ("ECHO_BENCHMARK", "ECHO_RUN", "ECHO_OUTPUTS", "ECHO_ANALYSIS"):
        env.pop(name, None)
    return subprocess.run(
        [sys.executable, "-c", _RUN_WITHOUT_GRADIO.format(app=app), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=REPO_ROOT,
    )


def test_space_without_gradio_names_the_extra_instead_of_a_traceback(tmp_path):
    result = _run_app("--benchmark", str(tmp_path / "no-benchmark"))
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert "the Space needs gradio" in result.stderr
    assert "pip install -e '.[space]'" in result.stderr
    assert result.stderr.strip().count("\n") == 0  # one line
