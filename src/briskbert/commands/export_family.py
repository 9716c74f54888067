"""Write a briskbert model folder back as a transformers family's own folder, loadable without remote code.

    briskbert export-family --model_dir runs/dapt/final --output_dir runs/dapt-bert

The family is the first whose configuration expresses the model's options exactly, or --family; the head is the
model's own. Before it is moved into place the folder is loaded back with transformers' Auto class and its outputs
are checked against briskbert's (within 1e-5, fp32). Options no family can express (RMSNorm, grouped-query
attention, ALiBi, ...) are refused, each named.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from briskbert.commands.arguments import parse
from briskbert.errors import CommandFailed, SettingError
from briskbert.training.tasks.settings import helped


@dataclass(frozen=True)
class ExportFamilyArguments:
    model_dir: str = field(metadata={"help": "Saved briskbert model folder."})
    output_dir: str = field(metadata={"help": "New folder for the family's model and tokenizer."})
    family: str | None = helped(
        "The family to write (model_type); default: the first of these that expresses the model.",
        choices=("bert", "roberta", "xlm-roberta", "distilbert", "electra", "modernbert"),
    )
    overwrite_output_dir: bool = helped(
        "Replace an existing output_dir (only once the export has succeeded).", False
    )

    def __post_init__(self):
        out = Path(self.output_dir)
        if out.exists() and any(out.iterdir()) and not self.overwrite_output_dir:
            raise SettingError(
                "output_dir", f"{out} is not empty; choose a new folder or add --overwrite_output_dir."
            )


def main(argv: list[str] | None = None):
    (args,) = parse(__doc__, ExportFamilyArguments, argv=argv)
    from briskbert.inputs import check_model_folder

    config = check_model_folder(Path(args.model_dir).expanduser(), "model_dir")  # before torch: fails fast
    if config["model_type"] != "briskbert":
        raise SettingError(
            "model_dir", f"{args.model_dir} has model_type {config['model_type']!r}, not briskbert."
        )
    from briskbert.modeling.conversion import CheckpointMismatchError, UnsupportedCheckpointError
    from briskbert.modeling.conversion.export_family import export_to_family

    try:
        class_name, difference = export_to_family(args.model_dir, args.output_dir, args.family)
    except UnsupportedCheckpointError as error:
        raise SettingError("family" if args.family else "model_dir", f"{args.model_dir}: {error}") from None
    except CheckpointMismatchError as error:
        raise CommandFailed(str(error)) from None
    print(
        f"Wrote {args.output_dir} as {class_name} (loads with plain transformers, no remote code); its outputs "
        f"match {args.model_dir} within {difference:.1e} (fp32)."
    )
