"""Judging: ECHO's VLM-judge protocols, verdict parsing, image preparation, and judge runs over output folders."""

from echo_builder.judge.judging import Judge, JudgeItem, trig_score
from echo_builder.judge.parsing import parse_preference, parse_rating
from echo_builder.judge.prompts import PAIRWISE, PROBABILITY_DIGITS, PROBABILITY_TRIG, SINGLE, JudgePrompt

__all__ = [
    "PAIRWISE",
    "PROBABILITY_DIGITS",
    "PROBABILITY_TRIG",
    "SINGLE",
    "Judge",
    "JudgeItem",
    "JudgePrompt",
    "parse_preference",
    "parse_rating",
    "trig_score",
]
