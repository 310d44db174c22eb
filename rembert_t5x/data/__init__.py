"""Data: the vocabulary, MLM and XTREME preprocessing, readers, QA features, the synthetic corpus, text sources."""
