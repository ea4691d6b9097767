"""Gradio app for the `echo_judge` metric: upload an output (and inputs), give a prompt and a judge spec."""

import os

import evaluate
import gradio as gr

METRIC = evaluate.load(os.path.dirname(os.path.abspath(__file__)))


def grade(prompt, output, input_image, judge_spec, base_url):
    if output is None:
        return "Upload an output image.", None
    options = {judge_spec: {"base_url": base_url}} if base_url and judge_spec.startswith("openai:") else None
    result = METRIC.compute(
        predictions=[output],
        references=[[input_image] if input_image is not None else []],
        prompts=[prompt],
        judges=[judge_spec],
        judge_options=options,
    )
    status = result["statuses"][judge_spec][0]
    score = result["scores"][0]
    summary = f"rating: {score:g} / 10" if status == "ok" else f"{status}: {result['nan_reasons'][0]}"
    return summary, result["raw_texts"][judge_spec][0]


with gr.Blocks(title="ECHO judge") as demo:
    gr.Markdown(
        "# ECHO judge\nRate an image-generation or editing output 1-10 with a VLM judge (arXiv 2510.15021)."
    )
    with gr.Row():
        input_image = gr.Image(type="filepath", image_mode=None, label="Input image (optional, for editing)")
        output = gr.Image(type="filepath", image_mode=None, label="Output image")
    prompt = gr.Textbox(label="Prompt")
    judge_spec = gr.Textbox(value="openai:gpt-4o", label="Judge backend spec")
    base_url = gr.Textbox(value="", label="OpenAI-compatible base URL (optional)")
    button = gr.Button("Judge")
    summary = gr.Textbox(label="Result")
    explanation = gr.Textbox(label="Judge's explanation", lines=8)
    button.click(grade, [prompt, output, input_image, judge_spec, base_url], [summary, explanation])

if __name__ == "__main__":
    demo.launch()
