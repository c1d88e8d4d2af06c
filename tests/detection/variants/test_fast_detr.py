from dataclasses import replace

import pytest
import torch
import torchvision

from attnkit.detection.architectures import build_criterion, build_model
from attnkit.detection.config import DetectionConfig, DetectionTrainConfig, FastDetrConfig, preset, with_arch
from attnkit.detection.postprocess import pairs, postprocess
from attnkit.detection.variants.focal_loss import sigmoid_focal_loss, softmax_form
from attnkit.detection.variants.multi_scale_features import level_geometry
from attnkit.detection.variants.query_groups import group_attention_mask
from attnkit.errors import ConfigError

ALL_OFF = dict(feature_levels=1, last_stage=5, deformable_attention=False, box_refinement=False, focal_loss=False,
               query_groups=1, two_stage=False, denoising_groups=0)
OPTIONS = [{}, dict(feature_levels=1), dict(deformable_attention=False, encoder_levels=3), dict(encoder_levels=3),
           dict(encoder_levels=2),
           dict(box_refinement=False, two_stage=False, denoising_groups=0), dict(focal_loss=False),
           dict(query_groups=1), dict(two_stage=False), dict(denoising_groups=2), dict(last_stage=5),
           dict(feature_levels=4),
           dict(distribution_refinement=True, localization_distillation=True),
           dict(distribution_refinement=True, denoising_groups=2, two_stage=False), dict(matchability_aware=True),
           dict(cross_scale_fusion=True, encoder_levels=2), dict(cross_scale_fusion=True),
           dict(stride4_level=True), dict(stride4_level=True, last_stage=5), ALL_OFF]


def _tiny(**fields) -> FastDetrConfig:
    """The tiny preset's sizes as `fast`, the ResNet stopping after C4 as in the small preset."""
    return with_arch(preset("tiny")[0], "fast", num_classes=3, dec_layers=2, **{"last_stage": 4, **fields})


def _inputs():
    images = torch.randn(2, 3, 64, 80)
    mask = torch.zeros(2, 64, 80, dtype=torch.bool)
    mask[1, 48:, :] = True  # the second image is smaller: padded below and right
    mask[1, :, 64:] = True
    targets = [{"labels": torch.tensor([0, 2]), "boxes": torch.tensor([[0.5, 0.5, 0.3, 0.2], [0.2, 0.3, 0.1, 0.2]])},
               {"labels": torch.tensor([1]), "boxes": torch.tensor([[0.6, 0.4, 0.2, 0.3]])}]
    return images, mask, targets


def _detr_name(name: str) -> str:
    """The DETR parameter a `fast` parameter with every technique off corresponds to."""
    for fast, detr in (("input_proj.proj.0.0.", "input_proj."), ("encoder.encoder.", "transformer.encoder."),
                       ("decoder.norm.", "transformer.decoder.norm."), ("decoder.queries.query_embed.", "query_embed."),
                       ("decoder.queries.bbox_embed.", "bbox_embed.")):
        if name.startswith(fast):
            return detr + name[len(fast):]
    if name.startswith("decoder.layers."):
        index, rest = name[len("decoder.layers."):].split(".layer.", 1)
        return f"transformer.decoder.layers.{index}.{rest}"
    return name


@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: ",".join(o) or "all-on")
def test_every_option_gives_the_shared_output_and_gradients(options):
    torch.manual_seed(0)
    config = _tiny(**options)
    model, criterion = build_model(config), build_criterion(config, DetectionTrainConfig())
    images, mask, targets = _inputs()
    outputs = model(images, mask, targets)
    assert outputs.logits.shape == (2, 10, 4) and outputs.boxes.shape == (2, 10, 4)
    # distribution refinement trains the first layer's box b^0 as one more prediction
    assert len(outputs.aux) == 1 + config.distribution_refinement and len(outputs.groups) == config.query_groups - 1
    assert (outputs.class_logits is not None) == config.focal_loss
    criterion(outputs, targets)["loss"].backward()
    missing = [name for name, p in model.named_parameters() if p.requires_grad and p.grad is None]
    assert not missing


def test_with_every_technique_off_fast_computes_detr():
    torch.manual_seed(0)
    fast = build_model(_tiny(**ALL_OFF))
    detr = build_model(with_arch(_tiny(), "detr"))
    detr_state = detr.state_dict()
    mapped = {_detr_name(name): tensor for name, tensor in fast.state_dict().items()}
    assert sorted(mapped) == sorted(detr_state)
    detr.load_state_dict(mapped)
    images, mask, _ = _inputs()
    for mode in (True, False):
        fast.train(mode), detr.train(mode)
        ours, theirs = fast(images, mask), detr(images, mask)
        torch.testing.assert_close(ours.logits, theirs.logits)
        torch.testing.assert_close(ours.boxes, theirs.boxes)
        torch.testing.assert_close(ours.aux[0].boxes, theirs.aux[0].boxes)


def test_query_groups_train_apart_and_are_inactive_at_inference():
    torch.manual_seed(0)
    model = build_model(_tiny(query_groups=3, two_stage=False))
    images, mask, _ = _inputs()
    model.train()
    before = model(images, mask)
    with torch.no_grad():
        model.decoder.queries.anchors[10:] += 0.5  # move groups 2 and 3 only
    after = model(images, mask)
    torch.testing.assert_close(after.boxes, before.boxes)  # group 1 does not see the others
    assert not torch.allclose(after.groups[0].boxes, before.groups[0].boxes)
    model.eval()
    evaluated = model(images, mask)
    assert not evaluated.groups and evaluated.boxes.shape == (2, 10, 4)
    single = build_model(_tiny(query_groups=1, two_stage=False)).eval()
    state = model.state_dict()
    state["decoder.queries.anchors"] = state["decoder.queries.anchors"][:10]
    single.load_state_dict(state)
    torch.testing.assert_close(single(images, mask).boxes, evaluated.boxes)
    torch.testing.assert_close(single(images, mask).logits, evaluated.logits)


def test_group_attention_mask_is_block_diagonal():
    expected = torch.tensor([[0, 0, 1, 1], [0, 0, 1, 1], [1, 1, 0, 0], [1, 1, 0, 0]], dtype=torch.bool)
    torch.testing.assert_close(group_attention_mask(2, 2), expected)
    assert group_attention_mask(1, 5) is None


def test_groups_stacked_along_the_batch_attend_as_under_the_block_diagonal_mask():
    """Both decoder layers (deformable, and DETR's behind its adapter): GROUPS=3 equals one sequence under
    `group_attention_mask`, outputs and gradients."""
    torch.manual_seed(0)
    model = build_model(_tiny(query_groups=3, two_stage=False))
    dense = build_model(_tiny(query_groups=3, two_stage=False, deformable_attention=False, encoder_levels=3))
    images, mask, _ = _inputs()
    for detector in (model, dense):
        levels = detector.input_proj(detector.backbone(images, mask))
        layer = detector.decoder.layers[0]
        x, query_pos = torch.randn(2, 12, 32, requires_grad=True), torch.randn(2, 12, 32)
        reference = torch.rand(2, 12, len(levels.shapes), 4)
        memory = levels.src.detach()
        common = (reference, memory, levels.pos, levels.key_padding, levels.shapes)
        stacked = layer(x, query_pos, *common, None, 3)
        masked = layer(x, query_pos, *common, group_attention_mask(3, 4), 1)
        torch.testing.assert_close(stacked, masked)
        grads = [torch.autograd.grad(out.square().sum(), x)[0] for out in (stacked, masked)]
        torch.testing.assert_close(*grads)


def test_box_refinement_starts_from_the_anchors_and_adds_corrections():
    torch.manual_seed(0)
    model = build_model(_tiny(query_groups=1, two_stage=False)).eval()
    images, mask, _ = _inputs()
    anchors = model.decoder.queries.anchors.sigmoid()
    outputs = model(images, mask)  # the correction heads start at zero: every layer returns the anchors
    torch.testing.assert_close(outputs.aux[0].boxes, anchors.expand(2, -1, -1))
    torch.testing.assert_close(outputs.boxes, anchors.expand(2, -1, -1))
    with torch.no_grad():
        model.decoder.queries.bbox_embed[0].layers[-1].bias.fill_(0.5)  # layer 1 moves every box by +0.5 logit
    outputs = model(images, mask)
    shifted = torch.sigmoid(torch.logit(anchors) + 0.5).expand(2, -1, -1)
    torch.testing.assert_close(outputs.aux[0].boxes, shifted)
    torch.testing.assert_close(outputs.boxes, shifted)  # layer 2 refines layer 1's boxes (zero change)


def test_focal_loss_equals_torchvision():
    torch.manual_seed(0)
    logits, targets = torch.randn(3, 7, 5), (torch.rand(3, 7, 5) > 0.7).float()
    torch.testing.assert_close(sigmoid_focal_loss(logits, targets),
                               torchvision.ops.sigmoid_focal_loss(logits, targets, reduction="none"))


def test_softmax_form_gives_the_sigmoid_score_of_the_best_class():
    logits = torch.tensor([[[-1.0, 2.0, 0.5], [-3.0, -4.0, -2.5]]])
    detections = postprocess(softmax_form(logits), torch.full((1, 2, 4), 0.5), torch.tensor([[10, 10]]))[0]
    torch.testing.assert_close(detections["scores"], torch.sigmoid(torch.tensor([2.0, -2.5])))
    torch.testing.assert_close(detections["labels"], torch.tensor([1, 2]))


def test_evaluation_pairs_keep_the_best_query_class_pairs_with_their_query_box():
    logits = torch.tensor([[[-1.0, 2.0, 0.5], [-3.0, -4.0, 1.0]]])  # 2 queries, 3 classes
    boxes = torch.tensor([[[0.5, 0.5, 0.2, 0.2], [0.25, 0.25, 0.5, 0.5]]])
    found = pairs(logits, boxes, torch.tensor([[10, 20]]), keep=3)[0]
    torch.testing.assert_close(found["scores"], torch.sigmoid(torch.tensor([2.0, 1.0, 0.5])))
    torch.testing.assert_close(found["labels"], torch.tensor([1, 2, 2]))  # query 0's second class counts too
    torch.testing.assert_close(found["boxes"], torch.tensor([[8.0, 4.0, 12.0, 6.0], [0.0, 0.0, 10.0, 5.0],
                                                             [8.0, 4.0, 12.0, 6.0]]))
    assert len(pairs(logits, boxes, torch.tensor([[10, 20]]))[0]["scores"]) == 6  # all, when fewer than 100


def test_config_refuses_impossible_technique_settings():
    with pytest.raises(ConfigError, match="feature_levels"):
        FastDetrConfig(feature_levels=5)
    with pytest.raises(ConfigError, match="last_stage"):
        FastDetrConfig(last_stage=3)
    with pytest.raises(ConfigError, match="dilation"):
        FastDetrConfig(dilation=True, last_stage=4)
    with pytest.raises(ConfigError, match="query_groups"):
        FastDetrConfig(query_groups=0)
    with pytest.raises(ConfigError, match="two_stage"):
        FastDetrConfig(box_refinement=False)
    with pytest.raises(ConfigError, match="denoising"):
        FastDetrConfig(box_refinement=False, two_stage=False, denoising_groups=2)
    with pytest.raises(ConfigError, match="encoder_levels below feature_levels"):
        FastDetrConfig(deformable_attention=False)
    with pytest.raises(ConfigError, match="encoder_levels must be at least 1"):
        FastDetrConfig(encoder_levels=0)
    with pytest.raises(ConfigError, match="denoising_groups"):
        FastDetrConfig(denoising_groups=-1)
    with pytest.raises(ConfigError, match="denoising_label_noise"):
        FastDetrConfig(denoising_label_noise=1.5)
    with pytest.raises(ConfigError, match="stride4_level .* needs deformable_attention"):
        FastDetrConfig(stride4_level=True, deformable_attention=False, encoder_levels=3)
    with pytest.raises(ConfigError, match="dropout"):  # DETR's checks too
        FastDetrConfig(dropout=1.0)


def test_two_stage_starts_every_group_from_the_best_proposals_and_trains_them():
    torch.manual_seed(0)
    config = _tiny(query_groups=2)
    model, criterion = build_model(config), build_criterion(config, DetectionTrainConfig())
    images, mask, targets = _inputs()
    outputs = model(images, mask)
    keys = sum(h * w for h, w in ((8, 10), (4, 5), (2, 3)))  # strides 8, 16, 32 of 64 x 80
    assert outputs.proposals.class_logits.shape == (2, keys, 3) and outputs.proposals.boxes.shape == (2, keys, 4)
    memory, levels = _memory(model, images, mask)
    logits, boxes, score, best = model.proposals(memory, levels, 10)
    assert (score[1] < 0).sum() > 0  # the padded part of the second image proposes nothing
    torch.testing.assert_close(best, boxes.gather(1, score.topk(10, dim=1).indices[..., None].expand(-1, -1, 4)))
    # the correction heads start at zero: the first decoder layer returns its references, the proposals
    torch.testing.assert_close(outputs.aux[0].boxes, best)
    torch.testing.assert_close(outputs.groups[0].aux[0].boxes, best)
    losses = criterion(outputs, targets)
    assert {"loss_ce_enc", "loss_bbox_enc", "loss_giou_enc"} <= set(losses)
    losses["loss"].backward()
    assert model.proposals.class_embed.weight.grad.abs().sum() > 0
    model.eval()
    assert model(images, mask).proposals is None  # inference: one set, the decoder's
    with torch.no_grad():
        model.proposals.bbox_embed.layers[-1].weight.normal_()  # every token's box now depends on its state
    _, no_boxes, _, chosen = model.proposals(memory, levels, 10)  # inference computes the chosen boxes only
    model.proposals.train()
    _, _, _, trained = model.proposals(memory, levels, 10)
    assert no_boxes is None and not torch.allclose(trained, best)  # no longer the anchors
    torch.testing.assert_close(chosen, trained)


def _memory(model, images, mask):
    levels = model.input_proj(model.backbone(images, mask))
    return model.encoder(levels), levels


def test_a_backbone_stopping_after_c4_makes_the_stride_32_level_by_a_convolution():
    torch.manual_seed(0)
    model = build_model(_tiny(last_stage=4)).eval()
    body = model.backbone[0].body
    assert "layer4" not in body and list(body.return_layers) == ["layer2", "layer3"]
    images, mask = torch.randn(2, 3, 72, 100), torch.zeros(2, 72, 100, dtype=torch.bool)
    with torch.no_grad():
        levels = model.input_proj(model.backbone(images, mask))
        assert levels.shapes == ((9, 13), (5, 7), (3, 4))  # strides 8, 16, 32 (the last: ceil of half of C4)
        made = model.input_proj.proj[2](body(images)["1"])  # a 3x3 stride-2 convolution and GroupNorm of C4
        torch.testing.assert_close(levels.src[:, -12:], made.flatten(2).transpose(1, 2))
    assert model(images, mask).boxes.shape == (2, 10, 4)
    d = model.input_proj.proj[0][0].out_channels
    for last_stage, read in ((5, [128, 256, 512, 512]), (4, [128, 256, 256, d])):  # a fourth level: from the third
        four = build_model(_tiny(feature_levels=4, last_stage=last_stage))
        assert [proj[0].in_channels for proj in four.input_proj.proj] == read


def test_the_stride4_level_reads_c2_as_the_finest_level_and_the_encoder_leaves_it_as_read():
    torch.manual_seed(0)
    model = build_model(_tiny(stride4_level=True)).eval()
    body = model.backbone[0].body
    assert list(body.return_layers) == ["layer1", "layer2", "layer3"]  # C2, C3, C4 (and C5 made from C4)
    images, mask = torch.randn(2, 3, 72, 100), torch.zeros(2, 72, 100, dtype=torch.bool)
    with torch.no_grad():
        levels = model.input_proj(model.backbone(images, mask))
        assert levels.shapes == ((18, 25), (9, 13), (5, 7), (3, 4))  # strides 4, 8, 16, 32
        c2 = model.input_proj.proj[0](body(images)["0"])  # a 1x1 convolution and GroupNorm of C2
        torch.testing.assert_close(levels.src[:, :18 * 25], c2.flatten(2).transpose(1, 2))
        memory = model.encoder(levels)  # encoder_levels=1: the coarsest level updated, C2, C3 and C4 as read
        torch.testing.assert_close(memory[:, :18 * 25 + 9 * 13], levels.src[:, :18 * 25 + 9 * 13])
    assert model(images, mask).boxes.shape == (2, 10, 4)
    assert model.encoder.layers[0].self_attn.num_levels == 4


def test_a_run_written_before_last_stage_existed_loads_with_the_resnet_to_c5():
    """Older `small` runs trained `fast` with layer4: their config.json has no `last_stage`, their weights hold C5."""
    model, train = preset("small")
    document = DetectionConfig(replace(model, num_classes=3), train, preset="small").to_dict()
    assert document["model"].pop("last_stage") == 4  # the preset's choice now
    older = DetectionConfig.from_dict(document).model
    assert older.last_stage == 5
    assert any(name.startswith("backbone.0.body.layer4.") for name in build_model(older).state_dict())


def test_an_unpadded_batch_geometry_is_kept_per_size_and_changes_nothing():
    torch.manual_seed(0)
    model = build_model(_tiny()).eval()
    fresh = build_model(_tiny()).eval()
    fresh.load_state_dict(model.state_dict())
    small, large = torch.randn(2, 3, 64, 80), torch.randn(2, 3, 96, 64)
    unpadded = {len(x[0, 0]): torch.zeros(2, *x.shape[-2:], dtype=torch.bool) for x in (small, large)}
    with torch.inference_mode():
        first = model(small, unpadded[64])
        model(large, unpadded[96])
        again = model(small, unpadded[64])  # the kept geometry of its size, not the last one
        computed = fresh(small, unpadded[64])
    assert len(model.backbone._kept) == 2
    for out in (again, computed):
        torch.testing.assert_close(out.boxes, first.boxes)
        torch.testing.assert_close(out.logits, first.logits)
    _, padded, targets = _inputs()
    with torch.inference_mode():
        with_padding = model(small, padded)  # padding: computed, not kept, not read from the unpadded one
        fresh.backbone._kept.clear()
        torch.testing.assert_close(with_padding.boxes, fresh(small, padded).boxes)
    assert len(model.backbone._kept) == 2
    assert not torch.allclose(with_padding.boxes, first.boxes)
    model.train()  # after evaluation under inference mode, training still backpropagates, twice
    criterion = build_criterion(_tiny(), DetectionTrainConfig())
    for _ in range(2):
        criterion(model(small, unpadded[64], targets), targets)["loss"].backward()
    assert len(model.backbone._kept) == 3  # the same size outside inference mode is kept apart


def test_the_kept_positions_follow_the_level_embeddings_as_training_changes_them():
    """Without gradients an unpadded size's positions (with the level embeddings) are kept; an optimizer's step
    or loaded weights change the embeddings, and the next call adds the new ones."""
    torch.manual_seed(0)
    model = build_model(_tiny()).eval()
    images, unpadded = torch.randn(2, 3, 64, 80), torch.zeros(2, 64, 80, dtype=torch.bool)

    def positions() -> torch.Tensor:
        with torch.inference_mode():
            return model.input_proj(model.backbone(images, unpadded)).pos

    kept = positions()
    assert positions() is kept  # the same size again: the kept tensor
    geometry = model.backbone.geometry(unpadded, model.input_proj(model.backbone(images, unpadded)).shapes)
    expected = torch.cat([p + e for p, e in zip(geometry.positions, model.input_proj.level_embed)], 1)
    torch.testing.assert_close(kept, expected.detach())
    embed = model.input_proj.level_embed
    embed.grad = torch.ones_like(embed)
    torch.optim.SGD([embed], lr=1.0).step()  # in place, as training's steps write it
    torch.testing.assert_close(positions(), kept - 1.0)
    model.load_state_dict({**model.state_dict(), "input_proj.level_embed": torch.zeros_like(
        model.input_proj.level_embed)})
    torch.testing.assert_close(positions(), torch.cat(geometry.positions, 1))


def test_an_unpadded_batch_skips_the_masks_and_ratios_and_detects_the_same(monkeypatch):
    torch.manual_seed(0)
    model = build_model(_tiny()).eval()
    images, unpadded = torch.randn(2, 3, 64, 80), torch.zeros(2, 64, 80, dtype=torch.bool)
    with torch.inference_mode():
        skipped = model(images, unpadded)
        levels = model.input_proj(model.backbone(images, unpadded))
        assert levels.key_padding is None and not levels.geometry.padded
        _, padded, _ = _inputs()
        assert model.input_proj(model.backbone(images, padded)).key_padding.equal(level_geometry(
            padded, levels.shapes, model.backbone[1]).padding)
        # the same all-False mask through the path that applies masks and ratios
        monkeypatch.setattr(model.backbone, "geometry", lambda mask, shapes: level_geometry(mask, shapes,
                                                                                            model.backbone[1]))
        masked = model(images, unpadded)
    assert model.input_proj(model.backbone(images, unpadded)).key_padding is not None
    torch.testing.assert_close(skipped.boxes, masked.boxes)
    torch.testing.assert_close(skipped.logits, masked.logits)


@pytest.mark.parametrize("fields", [{}, dict(encoder_levels=2), dict(encoder_levels=3)])
def test_inference_without_gradients_computes_what_the_forward_with_gradients_does(fields):
    """Without gradients the encoder writes its updates in place and the proposals zero only the chosen unusable
    keys; the detections are the same as with gradients (the forms training uses)."""
    torch.manual_seed(0)
    model = build_model(_tiny(**fields)).eval()
    images, mask, _ = _inputs()
    with torch.no_grad():
        fast = model(images, mask)
    slow = model(images, mask)
    torch.testing.assert_close(fast.logits, slow.logits.detach(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(fast.boxes, slow.boxes.detach(), rtol=1e-5, atol=1e-5)


def test_the_proposals_at_inference_are_the_training_forms_best_boxes_even_past_the_usable_keys():
    from attnkit.detection.variants.query_selection import EncoderProposals

    torch.manual_seed(0)
    model = build_model(_tiny()).eval()
    images, mask, _ = _inputs()
    with torch.no_grad():
        levels = model.input_proj(model.backbone(images, mask))
        memory = torch.randn_like(levels.src)
        proposals = EncoderProposals(32, 3, focal=True)
        torch.nn.init.normal_(proposals.bbox_embed.layers[-1].weight)
        usable = int(proposals.train()(memory, levels, 5)[2].ge(0).sum(1).min())
        for count in (5, usable + 7):  # past the usable keys of the padded image: some unusable keys are chosen
            trained = proposals.train()(memory, levels, count)
            inferred = proposals.eval()(memory, levels, count)
            torch.testing.assert_close(inferred[2], trained[2])  # the scores
            usable_keys = trained[2] >= 0  # each usable key's score: its best class's probability
            torch.testing.assert_close(trained[2][usable_keys], trained[0].sigmoid().max(-1).values[usable_keys])
            torch.testing.assert_close(inferred[3], trained[3])  # the chosen boxes
