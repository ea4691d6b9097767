"""Gradio app for `text_rendering`: upload an output image, give its prompt and a judge spec."""

import os

import evaluate
import gradio as gr

METRIC = evaluate.load(os.path.dirname(os.path.abspath(__file__)))


def score(output, prompt, judge_spec, base_url):
    if output is None:
        return "Upload an image."
    options = {judge_spec: {"base_url": base_url}} if base_url and judge_spec.startswith("openai:") else None
    result = METRIC.compute(
        predictions=[output], prompts=[prompt], judges=[judge_spec], judge_options=options
    )
    if result["nan_reasons"][0]:
        return f"NaN: {result['nan_reasons'][0]}"
    return f"text rendering {result['scores'][0]:.3f} (higher is better; judge rating {result['ratings'][judge_spec][0]:g}/10)"


with gr.Blocks(title="Text rendering") as demo:
    gr.Markdown(
        "# Text rendering\nA VLM judge proofreads the text in a generated image (ECHO, arXiv 2510.15021)."
    )
    output = gr.Image(type="filepath", image_mode=None, label="Output image")
    prompt = gr.Textbox(label="Prompt")
    judge_spec = gr.Textbox(value="openai:gpt-4o", label="Judge backend spec")
    base_url = gr.Textbox(value="", label="OpenAI-compatible base URL (optional)")
    result = gr.Textbox(label="Result")
    gr.Button("Judge").click(score, [output, prompt, judge_spec, base_url], result)

if __name__ == "__main__":
    demo.launch()
