"""The one training loop every job runs (``loop.run``) and what it needs: the ``Task``, config, checkpoints, logs."""
