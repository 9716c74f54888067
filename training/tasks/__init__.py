"""One module per training job, each a :class:`~briskbert.training.engine.task.Task` (pretraining,
classification, NER, QA, distillation), the settings dataclasses the jobs are given (:mod:`.settings`),
the pieces the fine-tuning jobs share (:mod:`.finetuning`) and the metrics they report."""
