"""The translation system: a Transformer sequence-to-sequence model trained on a parallel corpus."""
