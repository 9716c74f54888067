"""Model cards and publishing: the card (``card``), the files a publish uploads (``model_files``), the secret
scan (``secrets``), the publisher (``publishing``) and its check of the published commit (``verification``)."""
