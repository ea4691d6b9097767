"""Gradio app for `structure_distance`: upload an input and an output image."""

import os

import evaluate
import gradio as gr

METRIC = evaluate.load(os.path.dirname(os.path.abspath(__file__)))


def score(source, output, weights):
    if source is None or output is None:
        return "Upload both images."
    result = METRIC.compute(predictions=[output], references=[[source]], weights=weights or None)
    if result["nan_reasons"][0]:
        return f"NaN: {result['nan_reasons'][0]}"
    return f"structure_distance {result['scores'][0]:.4f} (lower is better)"


with gr.Blocks(title="Structure distance") as demo:
    gr.Markdown("# Structure distance\nECHO's community-driven metric (arXiv 2510.15021).")
    with gr.Row():
        source = gr.Image(type="filepath", image_mode=None, label="Input image")
        output = gr.Image(type="filepath", image_mode=None, label="Output image")
    weights = gr.Textbox(label="DINO weights file (empty: download from the Hub)")
    result = gr.Textbox(label="Result")
    gr.Button("Compute").click(score, [source, output, weights], result)

if __name__ == "__main__":
    demo.launch()
