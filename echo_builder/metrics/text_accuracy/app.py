"""Gradio app for `text_accuracy`: upload an output image and give its prompt (quote the text it must show)."""

import os

import evaluate
import gradio as gr

METRIC = evaluate.load(os.path.dirname(os.path.abspath(__file__)))


def score(output, prompt):
    if output is None:
        return "Upload an image."
    result = METRIC.compute(predictions=[output], prompts=[prompt or ""])
    if result["nan_reasons"][0]:
        return f"NaN: {result['nan_reasons'][0]}"
    lines = [f"text accuracy {result['scores'][0]:.3f} (higher is better; 1 = every quoted string exact)"]
    for match in result["matches"][0]:
        lines.append(
            f"{match['required']!r}: read {match['matched']!r}, {match['distance']} edit(s), CER {match['cer']:.3f}"
        )
    lines.append(f"OCR read: {result['ocr_text'][0]!r}")
    return "\n".join(lines)


with gr.Blocks(title="Text accuracy") as demo:
    gr.Markdown(
        "# Text accuracy\nOCR (PP-OCRv4) checks the text a generated image shows against the strings its prompt "
        "quotes (ECHO, arXiv 2510.15021)."
    )
    output = gr.Image(type="filepath", image_mode=None, label="Output image")
    prompt = gr.Textbox(label='Prompt (quote the text, e.g. a sign that says "OPEN")')
    result = gr.Textbox(label="Result", lines=6)
    gr.Button("Check").click(score, [output, prompt], result)

if __name__ == "__main__":
    demo.launch()
