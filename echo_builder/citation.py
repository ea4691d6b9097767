"""How to cite ECHO; the metric cards, evaluate modules and dataset cards use this one copy."""

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
