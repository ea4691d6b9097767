"""How to cite ECHO: the one copy, used by the dataset card here and, through :mod:`echo_builder.citation`, by the
metric cards and evaluate modules (it lives in ``echo_dataset`` because that package must not import
``echo_builder``)."""

__all__ = ["ECHO_BIBTEX", "ECHO_PAPER_URL"]

ECHO_PAPER_URL = "https://arxiv.org/abs/2510.15021"

ECHO_BIBTEX = """\
@inproceedings{echo2026,
  title={Constantly Improving Image Models Need Constantly Improving Benchmarks},
  booktitle={International Conference on Learning Representations (ICLR)},
  year={2026},
  note={arXiv:2510.15021}
}
"""
