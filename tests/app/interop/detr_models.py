"""Small DETR models of transformers', built here with random weights (never downloaded), for the interop tests.

A module of its own name (not conftest.py): `from conftest import ...` would find whichever conftest
module pytest imported first when several test folders run in one session.
"""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")


def hf_detr(layer_type: str = "basic", seed: int = 0):
    """A small DetrForObjectDetection with transformers' own ResNet (no timm, nothing downloaded)."""
    torch.manual_seed(seed)
    depths, hidden = ([2, 2, 2, 2], [64, 128, 256, 512]) if layer_type == "basic" else \
        ([3, 4, 6, 3], [256, 512, 1024, 2048])
    backbone = transformers.ResNetConfig(layer_type=layer_type, depths=depths, hidden_sizes=hidden,
                                         out_features=["stage4"])
    config = transformers.DetrConfig(
        use_timm_backbone=False, use_pretrained_backbone=False, backbone_config=backbone, d_model=32,
        encoder_layers=1, decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
        encoder_ffn_dim=64, decoder_ffn_dim=64, num_queries=7, num_labels=5)
    model = transformers.DetrForObjectDetection(config).eval()
    with torch.no_grad():  # random running statistics, so the frozen batch norms are not the identity
        for name, buffer in model.named_buffers():
            if name.endswith("running_mean"):
                buffer.normal_(0, 0.1)
            elif name.endswith("running_var"):
                buffer.uniform_(0.5, 1.5)
    return model


def random_images(seed: int = 1):
    """Two images (2, 3, 64, 96), the second padded on the right: (images, mask True on padding)."""
    generator = torch.Generator().manual_seed(seed)
    images = torch.randn(2, 3, 64, 96, generator=generator)
    mask = torch.zeros(2, 64, 96, dtype=torch.bool)
    mask[1, :, 70:] = True
    return images, mask
