import torch
from torchvision.ops import box_convert

from attnkit.detection.architectures import build_criterion, build_model
from attnkit.detection.config import DetectionConfig, DetectionTrainConfig, preset, with_arch
from attnkit.detection.variants.denoising_queries import DenoisingGenerator, denoising_attention_mask, noised_boxes
from attnkit.detection.variants.query_groups import group_attention_mask


def _tiny(**fields):
    return with_arch(preset("tiny")[0], "fast", num_classes=3, dec_layers=2,
                     **{"last_stage": 4, "denoising_groups": 3, **fields})


def _inputs():
    torch.manual_seed(1)
    images, mask = torch.randn(3, 3, 64, 64), torch.zeros(3, 64, 64, dtype=torch.bool)
    targets = [{"labels": torch.tensor([0, 2]), "boxes": torch.tensor([[0.5, 0.5, 0.3, 0.2], [0.2, 0.3, 0.1, 0.2]])},
               {"labels": torch.tensor([1]), "boxes": torch.tensor([[0.6, 0.4, 0.2, 0.3]])},
               {"labels": torch.zeros(0, dtype=torch.int64), "boxes": torch.zeros(0, 4)}]
    return images, mask, targets


def test_noise_moves_positives_less_than_lambda_and_negatives_between_lambda_and_twice():
    torch.manual_seed(0)
    boxes = torch.tensor([[0.5, 0.5, 0.2, 0.4]]).repeat(2000, 1)
    half = torch.tensor([0.1, 0.2, 0.1, 0.2])
    for low, high in ((0.0, 1.0), (1.0, 2.0)):
        moved = (box_convert(noised_boxes(boxes, 0.4, low, high), "cxcywh", "xyxy")
                 - box_convert(boxes, "cxcywh", "xyxy")).abs() / half  # in units of half the size
        assert moved.min() >= low * 0.4 - 1e-5 and moved.max() < high * 0.4 + 1e-5
        assert moved.max() > (high - 0.05) * 0.4  # the whole range is used


def test_generator_fills_groups_with_positives_then_negatives_and_matches_the_positives():
    torch.manual_seed(0)
    generator = DenoisingGenerator(num_classes=3, d_model=8, groups=2, label_noise=0.0)
    _, _, targets = _inputs()
    queries = generator(targets)
    assert queries.group_size == 4 and queries.count == 8  # 2 * (most objects: 2) per group
    assert queries.content.shape == (3, 8, 8) and queries.boxes.shape == (3, 8, 4)
    first, second, empty = queries.matches
    torch.testing.assert_close(first.queries, torch.tensor([0, 1, 4, 5]))  # the positives of both groups
    torch.testing.assert_close(first.objects, torch.tensor([0, 1, 0, 1]))
    torch.testing.assert_close(second.objects, torch.tensor([0, 0, 0, 0]))  # one object, repeated
    assert len(empty.queries) == 0  # nothing to rebuild: all its queries are negatives
    # without label noise, a query's content is its object's label embedding
    torch.testing.assert_close(queries.content[0, [0, 1, 2, 3]], generator.label_embed.weight[[0, 2, 0, 2]])
    nothing = generator([{"labels": torch.zeros(0, dtype=torch.int64), "boxes": torch.zeros(0, 4)}])
    assert nothing.count == 4 and len(nothing.matches[0].queries) == 0  # negatives only, never no queries


def test_attention_mask_keeps_groups_apart_and_hides_them_from_the_matching_queries():
    torch.manual_seed(0)
    queries = DenoisingGenerator(3, 8, groups=2)(_inputs()[2])
    mask = denoising_attention_mask(queries, group_attention_mask(2, 3), 6, torch.device("cpu"))
    assert mask.shape == (14, 14)
    assert not mask[:4, :4].any() and mask[:4, 4:].all() and not mask[4:8, 4:8].any()
    assert mask[8:, :8].all()  # matching queries see no denoising query
    torch.testing.assert_close(mask[8:, 8:], group_attention_mask(2, 3))


def test_denoising_trains_and_leaves_the_matching_queries_and_inference_unchanged():
    torch.manual_seed(0)
    config = _tiny(query_groups=2)
    model, criterion = build_model(config), build_criterion(config, DetectionTrainConfig())
    images, mask, targets = _inputs()
    with_dn = model(images, mask, targets)
    without = model(images, mask)
    assert len(with_dn.denoising.layers) == 2 and len(with_dn.denoising.matches) == 3
    assert with_dn.denoising.layers[-1].boxes.shape == (3, 3 * 4, 4)  # 3 groups of 2 * 2 queries
    assert without.denoising is None
    for key in ("boxes", "class_logits"):  # the matching queries cannot see the denoising ones
        torch.testing.assert_close(getattr(with_dn, key), getattr(without, key))
        torch.testing.assert_close(getattr(with_dn.groups[0], key), getattr(without.groups[0], key))
    losses = criterion(with_dn, targets)
    assert {"loss_ce_dn", "loss_bbox_dn", "loss_giou_dn"} <= set(losses)
    assert losses["loss"] > criterion(without, targets)["loss"]
    losses["loss"].backward()
    assert model.denoising.label_embed.weight.grad.abs().sum() > 0
    model.eval()
    evaluated = model(images, mask, targets)
    assert evaluated.denoising is None
    torch.testing.assert_close(evaluated.boxes, model(images, mask).boxes)


def test_positive_queries_at_the_true_boxes_are_rebuilt_exactly_by_the_first_layer():
    """With zero box corrections (the heads' start), a positive's first-layer box is its noised reference;
    with no noise at all it is the true box, and the box losses of that layer are zero."""
    torch.manual_seed(0)
    config = _tiny(query_groups=1, two_stage=False, denoising_box_noise=0.0)
    model, criterion = build_model(config), build_criterion(config, DetectionTrainConfig())
    assert model.denoising.box_noise == 0.0 and model.denoising.label_noise == config.denoising_label_noise
    images, mask, targets = _inputs()
    dn = model(images, mask, targets).denoising
    first = dn.layers[0].boxes
    torch.testing.assert_close(first[0, [0, 1]], targets[0]["boxes"], atol=1e-4, rtol=0)
    terms = criterion.criterion.terms(*criterion.criterion.stacked(dn.layers[:1]), targets, dn.matches, 3.0)
    assert terms["loss_bbox"] < 1e-3 and terms["loss_giou"] < 1e-3


def test_older_run_configs_load_without_denoising_and_with_the_encoder_they_had():
    config = DetectionConfig(_tiny()).to_dict()
    del config["model"]["denoising_groups"], config["model"]["encoder_levels"]
    model = DetectionConfig.from_dict(config).model
    assert model.denoising_groups == 0 and model.encoder_levels == 3  # before the lite encoder: every level
    for lite, levels, expected in ((True, 3, 2), (False, 3, 3), (True, 1, 1)):  # `lite_encoder`: all but C3
        config["model"].update(lite_encoder=lite, feature_levels=levels)
        assert DetectionConfig.from_dict(config).model.encoder_levels == expected
