"""Detector variants: one technique per module, assembled by `fast_detr` (`--arch fast`).

`multi_scale_features` (strides 8/16/32), `multi_scale_deformable_attention` (Zhu et al. 2021),
`deformable_transformer` (its encoder and decoder layers), `box_refinement` (anchor-box queries
refined layer by layer: Zhu et al. 2021, Liu et al. 2022), `query_selection` (two-stage: the
decoder starts from the encoder's best proposals, Zhu et al. 2021, Zhang et al. 2023), `focal_loss`
(sigmoid focal classification and matching cost), `varifocal_loss` (IoU-aware classification, as
RT-DETR trains it: Zhao et al. 2024), `matchability_aware_loss` (DEIM's, Huang et al. 2025),
`query_groups` (one-to-many training: Group DETR, Chen et al. 2023). Each is switched off by a field
of `FastDetrConfig`; with all off `fast` computes DETR.
"""
