"""The README of a folder ``briskbert quantize`` wrote (``templates/quantized_readme.md``): for torchao, the model
card and the speed table; otherwise what the folder holds, how far it is from fp32, and how to run it."""

from __future__ import annotations

from pathlib import Path

from briskbert.processes import to_argv

from .card import CardError, read_quantization, render_card

TEMPLATE_PATH = Path(__file__).parent / "templates" / "quantized_readme.md"


def render_quantized_readme(
    folder: str | Path, folder_name: str, output_names: list[str], auto_class: str
) -> str:
    """The README of ``folder`` (its ``quantization.json`` written), to be published as ``folder_name``."""
    import jinja2

    from briskbert.modeling.export import SENTENCE_EMBEDDING

    facts = read_quantization(folder)
    card = None
    if facts["backend"] == "torchao":
        try:
            card = str(render_card(folder, repo_id=f"your-namespace/{folder_name}")).rstrip("\n")
        except CardError:  # a head the card has no usage snippet for (multiple choice): the plain README
            pass
    template = jinja2.Template(TEMPLATE_PATH.read_text(), trim_blocks=True, lstrip_blocks=True)
    return template.render(
        **facts,
        card=card,
        folder_name=folder_name,
        output_names=output_names,
        auto_class=auto_class,
        embedding_output=SENTENCE_EMBEDDING,
        saved_bytes=facts["weights_bytes"].get(facts["precision"], facts["weights_bytes"]["fp32"]),
        backend_flag=" ".join(to_argv(backend=facts["choice"]["requested"])),
    )
