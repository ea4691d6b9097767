"""Gradio app for `color_shift`: upload an input and an output image; see the shift and the mean colors."""

import os

import evaluate
import gradio as gr
import numpy as np

METRIC = evaluate.load(os.path.dirname(os.path.abspath(__file__)))


def swatch(rgb):
    return np.full((64, 64, 3), np.clip(np.asarray(rgb, dtype=float), 0, 255), dtype=np.uint8)


def score(source, output):
    if source is None or output is None:
        return "Upload both images.", None, None
    result = METRIC.compute(predictions=[output], references=[[source]], pooled=True)
    if result["nan_reasons"][0]:
        return f"NaN: {result['nan_reasons'][0]}", None, None
    dr, dg, db = result["deltas"][0]
    text = f"color shift {result['scores'][0]:.2f} levels (lower is better); deltas R {dr:+.1f} G {dg:+.1f} B {db:+.1f}"
    from echo_builder.scoring.color import channel_histograms, mean_rgb

    return text, swatch(mean_rgb(channel_histograms(source))), swatch(mean_rgb(channel_histograms(output)))


with gr.Blocks(title="Color shift") as demo:
    gr.Markdown("# Color shift\nHow far an edit moves the mean color (ECHO, arXiv 2510.15021).")
    with gr.Row():
        source = gr.Image(type="filepath", image_mode=None, label="Input image")
        output = gr.Image(type="filepath", image_mode=None, label="Output image")
    button = gr.Button("Compute")
    result = gr.Textbox(label="Result")
    with gr.Row():
        input_swatch = gr.Image(label="Input mean color")
        output_swatch = gr.Image(label="Output mean color")
    button.click(score, [source, output], [result, input_swatch, output_swatch])

if __name__ == "__main__":
    demo.launch()
