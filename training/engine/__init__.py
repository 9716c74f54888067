"""The one training loop every job runs (:func:`briskbert.training.engine.loop.run`) and what it needs:
the torch-free :class:`~briskbert.training.engine.arguments.TrainingConfig`, checkpoints and resume, the
optimizer and schedule, logging and the training facts a model card is written from."""
