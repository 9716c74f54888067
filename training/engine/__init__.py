"""The one training loop every job runs (:func:`briskbert.training.engine.loop.run`) and what it needs: the
``Task`` a job hands it, ``TrainingConfig``, checkpoints, the optimizer and schedule, logs and training facts."""
