"""Data for training: the pretraining corpus and its token store, sequence building, MLM masking, and the
task files (tables, CoNLL, SQuAD) that fine-tuning reads."""
