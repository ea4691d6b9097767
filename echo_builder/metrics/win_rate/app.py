"""Gradio app for the `win_rate` metric: paste per-sample scores as CSV (model, sample_id, score)."""

import io
import os

import evaluate
import gradio as gr
import pandas as pd

METRIC = evaluate.load(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = "model,sample_id,score\nA,p1,8\nB,p1,5\nA,p2,6\nB,p2,7\nA,p3,9\nB,p3,\n"


def rank(csv_text, n_boot):
    frame = pd.read_csv(io.StringIO(csv_text), dtype={"model": str, "sample_id": str})
    result = METRIC.compute(
        model=list(frame["model"]),
        sample_id=list(frame["sample_id"]),
        score=list(frame["score"]),
        n_boot=int(n_boot),
    )
    rows = [
        {
            column: result[column][m]
            for column in ("win_rate", "ci_low", "ci_high", "bt_rating", "n_comparisons")
        }
        | {"model": m, "missing": result["n_missing"][m]}
        for m in result["models"]
    ]
    return pd.DataFrame(rows)[
        ["model", "win_rate", "ci_low", "ci_high", "bt_rating", "n_comparisons", "missing"]
    ]


with gr.Blocks(title="ECHO win rate") as demo:
    gr.Markdown("# ECHO win rate\nPseudo-pairwise win rates with 95% bootstrap intervals over prompts.")
    scores = gr.Textbox(
        value=EXAMPLE, lines=10, label="Scores (CSV: model, sample_id, score; empty = no output)"
    )
    n_boot = gr.Number(value=1000, label="Bootstrap replicates", precision=0)
    table = gr.Dataframe(label="Leaderboard")
    gr.Button("Rank").click(rank, [scores, n_boot], table)

if __name__ == "__main__":
    demo.launch()
