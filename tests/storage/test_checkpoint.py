"""Weights and training-state files: round trips, tied weights, damage detection, all-or-nothing loads."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.testing import assert_close

from attnkit.errors import CheckpointError
from attnkit.storage import load_training_state, load_weights, read_weights, save_training_state, save_weights


class TiedLanguageModel(nn.Module):
    """Embedding and output projection share one matrix (Vaswani et al. 2017, section 3.4)."""

    def __init__(self, vocab: int = 11, d_model: int = 4) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab, d_model)
        self.norm = nn.LayerNorm(d_model)
        self.output = nn.Linear(d_model, vocab, bias=False)
        self.output.weight = self.embedding.weight


def test_weights_round_trip_with_tied_tensors(tmp_path):
    torch.manual_seed(0)
    source, target = TiedLanguageModel(), TiedLanguageModel()
    save_weights(tmp_path / "w.safetensors", source.state_dict(), {"step": 3, "note": "tied"})
    assert load_weights(tmp_path / "w.safetensors", target) == {"step": 3, "note": "tied"}
    for name, tensor in source.state_dict().items():
        assert_close(target.state_dict()[name], tensor, rtol=0, atol=0)
    assert target.output.weight is target.embedding.weight  # still tied after loading
    tensors, _ = read_weights(tmp_path / "w.safetensors")
    assert set(tensors) == set(source.state_dict())


def test_load_weights_names_missing_unexpected_and_misshaped_tensors_and_loads_nothing(tmp_path):
    torch.manual_seed(0)
    state = TiedLanguageModel().state_dict()
    del state["norm.bias"]
    state["norm.weight"] = torch.ones(5)
    state["extra.weight"] = torch.zeros(2)
    save_weights(tmp_path / "w.safetensors", state)
    model = TiedLanguageModel()
    before = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    with pytest.raises(CheckpointError) as error:
        load_weights(tmp_path / "w.safetensors", model)
    message = str(error.value)
    assert "w.safetensors" in message and "missing: norm.bias" in message
    assert "unexpected: extra.weight" in message and "norm.weight (5,) != (4,)" in message
    for name, tensor in model.state_dict().items():  # nothing was copied, not even the tensors that fit
        assert_close(tensor, before[name], rtol=0, atol=0)


def test_training_state_round_trip_keeps_int_keys_tuples_and_tensors(tmp_path):
    torch.manual_seed(0)
    model = nn.Linear(3, 2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.98))
    model(torch.randn(4, 3)).sum().backward()
    optimizer.step()
    state = {"optimizer": optimizer.state_dict(), "step": 7, "ratio": 0.25, "name": "x", "none": None,
             "bf16": torch.arange(4, dtype=torch.bfloat16), "nested": [(1, 2), {"a": torch.ones(2)}]}
    save_training_state(tmp_path / "s.safetensors", state)
    loaded = load_training_state(tmp_path / "s.safetensors")
    assert loaded["step"] == 7 and loaded["ratio"] == 0.25 and loaded["name"] == "x" and loaded["none"] is None
    assert loaded["nested"][0] == (1, 2)
    assert_close(loaded["nested"][1]["a"], torch.ones(2))
    assert_close(loaded["bf16"], state["bf16"], rtol=0, atol=0)
    assert loaded["optimizer"]["param_groups"][0]["betas"] == (0.9, 0.98)
    assert set(loaded["optimizer"]["state"]) == {0, 1}
    restored = torch.optim.AdamW(model.parameters(), lr=1e-3)
    restored.load_state_dict(loaded["optimizer"])
    assert_close(restored.state_dict()["state"][0]["exp_avg"], optimizer.state_dict()["state"][0]["exp_avg"])


def test_truncated_and_corrupted_files_are_named(tmp_path):
    path = tmp_path / "s.safetensors"
    save_training_state(path, {"weights": torch.arange(64, dtype=torch.float32), "step": 1})
    data = path.read_bytes()
    path.write_bytes(data[:-10])
    with pytest.raises(CheckpointError, match=r"s\.safetensors is truncated"):
        load_training_state(path)
    flipped = bytearray(data)
    flipped[-5] ^= 0xFF  # a flipped bit inside the tensor data: still a well-formed file
    path.write_bytes(bytes(flipped))
    with pytest.raises(CheckpointError, match=r"s\.safetensors is corrupt: its content hash"):
        load_training_state(path)
    with pytest.raises(CheckpointError, match="not an attnkit weights file"):
        path.write_bytes(data)
        load_weights(path, nn.Linear(1, 1))


def test_unsupported_state_values_are_refused_by_name(tmp_path):
    with pytest.raises(TypeError, match="'task/callback'"):
        save_training_state(tmp_path / "s.safetensors", {"task": {"callback": print}})
    assert not (tmp_path / "s.safetensors").exists()
