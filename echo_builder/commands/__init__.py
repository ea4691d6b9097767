"""The ``echo-bench`` subcommands, one module per area; :mod:`echo_builder.cli` assembles them."""
