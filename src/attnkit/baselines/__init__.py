"""Baselines the attention models are measured against: the RNN encoder-decoder with additive attention."""

from attnkit.baselines.bahdanau_rnn import (
    BahdanauRNN,
    BahdanauRNNConfig,
    alignment,
    capture_alignment,
    check_architecture,
    match_parameters,
    parameter_count,
)

__all__ = ["BahdanauRNN", "BahdanauRNNConfig", "alignment", "capture_alignment", "check_architecture",
           "match_parameters", "parameter_count"]
