"""The demo's bundled example data (see ``README.md`` here and :mod:`echo_builder.demo`)."""
