"""The ECHO Space's logic: data sources, handlers and the Gradio layout (``spaces_app/app.py`` only launches it).

Importable without launching anything: :func:`build_demo` returns the ``gr.Blocks``; the tab data live in
:mod:`echo_space.benchmark`, :mod:`echo_space.leaderboard`, :mod:`echo_space.playground` and :mod:`echo_space.about`.
"""

from echo_space.settings import ENV_VARS, SpaceSettings
from echo_space.ui import CSS, EchoSpace, allowed_paths, build_demo, theme

__all__ = ["CSS", "ENV_VARS", "EchoSpace", "SpaceSettings", "allowed_paths", "build_demo", "launch", "theme"]


def launch(demo, *, host: str = "127.0.0.1", port: int | None = None, block: bool = True, **kwargs):
    """Launch ``demo`` (from :func:`build_demo`) locally: no share link, no analytics, system fonts.

    Args:
        host: interface to listen on (``0.0.0.0`` on a Space; loopback by default).
        port: TCP port; ``None`` lets Gradio pick from 7860 upwards.
        block: keep the calling thread until interrupted (``False`` returns at once, for tests).
        kwargs: further ``gr.Blocks.launch`` arguments.

    Returns:
        What ``launch`` returns (the FastAPI app, local URL and share URL).
    """
    demo.echo_space.warm()
    return demo.launch(
        server_name=host,
        server_port=port,
        share=False,
        prevent_thread_lock=not block,
        allowed_paths=allowed_paths(demo.echo_space),
        theme=theme(),
        css=CSS,
        **kwargs,
    )
