"""How to cite ECHO; the metric cards, evaluate modules and dataset cards use this one copy (defined in
:mod:`echo_dataset.citation`)."""

from echo_dataset.citation import ECHO_BIBTEX, ECHO_PAPER_URL

__all__ = ["ECHO_BIBTEX", "ECHO_PAPER_URL"]
