"""One module per training job (pretraining, classification, NER, QA, distillation), the pieces they share
(:mod:`.finetuning`, :mod:`.task_arguments`) and the metrics they report."""
