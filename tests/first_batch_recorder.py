"""``python -m briskbert`` that also writes each masking collator's first batch to ``first_batches.json``:
test_ablate.py launches its runs through it to compare the masks the processes really drew."""

import json
import sys
from pathlib import Path

from briskbert.cli import main
from briskbert.training.data.masking import MaskingCollator

_collate = MaskingCollator.__call__
_recorded: dict[str, dict] = {}


def _recording_collate(self, examples):
    batch = _collate(self, examples)
    if str(self.seed) not in _recorded and "--output_dir" in sys.argv:
        _recorded[str(self.seed)] = {
            "input_ids": batch["input_ids"].tolist(),
            "labels": batch["labels"].tolist(),
        }
        output_dir = Path(sys.argv[sys.argv.index("--output_dir") + 1])
        output_dir.mkdir(parents=True, exist_ok=True)
        (output_dir / "first_batches.json").write_text(json.dumps(_recorded))
    return batch


MaskingCollator.__call__ = _recording_collate

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
