"""ECHO's Hugging Face Space: ``python app.py --benchmark PATH_OR_HUB_ID [--run RUN] [--outputs DIR]``.

On a Space the runner starts ``python app.py`` with no arguments: the settings come from the Space's variables
(``ECHO_BENCHMARK``, ``ECHO_RUN``, ...; see ``echo_space/settings.py``). ``gradio app.py -- --benchmark ...``
reloads on edits. The logic lives in the ``echo_space`` package beside this file.
"""

import os
import sys

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import click

try:
    from echo_space.cli import main
except ModuleNotFoundError as exc:  # a core install: the Space's extra is missing
    if exc.name != "gradio":
        raise
    sys.exit(
        "error: the Space needs gradio, which is not installed. Install it with: pip install -e '.[space]' "
        "(from a clone of echo-bench) or pip install 'echo-bench[space]'"
    )

demo = None  # set by main(); `gradio app.py` reload mode looks it up by this name

if __name__ == "__main__":
    try:
        demo = main(prog_name="app.py", standalone_mode=False)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except click.Abort:
        sys.exit(1)
