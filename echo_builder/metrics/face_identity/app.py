"""Gradio app for `face_identity`: upload an input and an output image."""

import os

import evaluate
import gradio as gr

METRIC = evaluate.load(os.path.dirname(os.path.abspath(__file__)))


def score(source, output, backend):
    if source is None or output is None:
        return "Upload both images."
    result = METRIC.compute(predictions=[output], references=[[source]], backend=backend)
    if result["nan_reasons"][0]:
        return f"NaN: {result['nan_reasons'][0]}"
    return f"face_identity {result['scores'][0]:.4f} (higher is better)"


with gr.Blocks(title="Face identity") as demo:
    gr.Markdown("# Face identity\nECHO's community-driven metric (arXiv 2510.15021).")
    with gr.Row():
        source = gr.Image(type="filepath", image_mode=None, label="Input image")
        output = gr.Image(type="filepath", image_mode=None, label="Output image")
    backend = gr.Dropdown(["dlib", "auraface"], value="dlib", label="Face backend")
    result = gr.Textbox(label="Result")
    gr.Button("Compute").click(score, [source, output, backend], result)

if __name__ == "__main__":
    demo.launch()
