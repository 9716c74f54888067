"""The one training loop every job runs (:func:`briskbert.training.engine.loop.run`) and what it needs:
the :class:`~briskbert.training.engine.task.Task` a job hands it, the torch-free
:class:`~briskbert.training.engine.config.TrainingConfig`, checkpoints and resume, finite checks, the
optimizer and schedule, logging, and the typed training facts a model card is written from."""
