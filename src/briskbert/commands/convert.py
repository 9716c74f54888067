"""Import a transformers checkpoint folder (BERT, RoBERTa, XLM-R, DistilBERT, ELECTRA, ModernBERT: the bare model or
any of its heads, from config.json's model_type and architectures) into a BriskBert folder that gives the same
outputs, with the source tokenizer and a sentence-transformers checkpoint's pooling files.

    briskbert convert --src path/to/checkpoint --out path/to/briskbert [--architecture RobertaForMaskedLM]
"""

from dataclasses import dataclass, field
from pathlib import Path

from briskbert.commands.arguments import parse
from briskbert.errors import SettingError
from briskbert.training.tasks.settings import helped


@dataclass(frozen=True)
class ConvertArguments:
    src: str = field(metadata={"help": "checkpoint folder (config.json + safetensors or .bin)"})
    out: str = field(metadata={"help": "new folder for the BriskBert model and tokenizer"})
    architecture: str | None = helped(
        "source head to import, e.g. RobertaForSequenceClassification (default: config.json's architectures)"
    )
    no_tokenizer: bool = helped("do not carry the tokenizer over", False)
    overwrite_output_dir: bool = helped(
        "replace an existing --out folder (only once the new conversion has succeeded)", False
    )
    source_repo_id: str | None = helped(
        "the checkpoint's Hub id (e.g. FacebookAI/roberta-base), named as base model on the cards of models "
        "trained from the converted folder"
    )

    def __post_init__(self):
        out = Path(self.out)
        if out.is_dir() and any(out.iterdir()) and not self.overwrite_output_dir:
            raise SettingError(
                "out", f"{out} is not empty; choose a new folder or add --overwrite_output_dir."
            )


def main(argv: list[str] | None = None):
    (args,) = parse(__doc__, ConvertArguments, argv=argv)
    from briskbert.inputs import check_model_folder

    check_model_folder(Path(args.src).expanduser(), "src", need_tokenizer=False)  # before torch: fails fast
    from briskbert.modeling.conversion import convert_checkpoint

    model = convert_checkpoint(
        args.src,
        args.out,
        args.architecture,
        save_tokenizer=not args.no_tokenizer,
        source_repo_id=args.source_repo_id,
    )
    print(
        f"Converted {args.src} -> {args.out} as {type(model).__name__} "
        f"({sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters)."
    )
