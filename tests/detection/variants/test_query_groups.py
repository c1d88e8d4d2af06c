import torch

from attnkit.detection.hungarian_matcher import hungarian_match
from attnkit.detection.output import DetectionOutput, SetPrediction
from attnkit.detection.set_criterion import SetCriterion
from attnkit.detection.variants.query_groups import group_losses, split_groups


def _targets():
    return [{"labels": torch.tensor([0, 2]), "boxes": torch.tensor([[0.3, 0.3, 0.2, 0.2], [0.7, 0.6, 0.3, 0.2]])},
            {"labels": torch.zeros(0, dtype=torch.int64), "boxes": torch.zeros(0, 4)}]


def test_groups_scored_as_one_batch_equal_each_layer_scored_alone():
    torch.manual_seed(0)
    criterion = SetCriterion(num_classes=3)
    sets = [SetPrediction(torch.randn(2, 4, 4), torch.rand(2, 4, 4) * 0.4 + 0.3) for _ in range(6)]
    groups = [DetectionOutput.from_layers(sets[g * 3:g * 3 + 3]) for g in range(2)]  # 2 groups of 3 layers
    losses, total = group_losses(criterion, groups, _targets(), 2.0)
    alone = [criterion.set_terms([s], _targets(), 2.0) for s in sets]  # each (1,)
    for name in ("loss_ce", "loss_bbox", "loss_giou", "class_error"):  # the first group's, by name
        torch.testing.assert_close(losses[name], alone[2][name][0])
        torch.testing.assert_close(losses[f"{name}_0"], alone[0][name][0])
    torch.testing.assert_close(total, sum(criterion.weighted(terms) for terms in alone))  # G times the mean
    stacked = hungarian_match(torch.cat([s.logits for s in sets]), torch.cat([s.boxes for s in sets]), _targets())
    for i, s in enumerate(sets):  # each group matched one-to-one on its own
        for one, batched in zip(hungarian_match(s.logits, s.boxes, _targets()), stacked[2 * i:2 * i + 2]):
            assert torch.equal(one.queries, batched.queries) and torch.equal(one.objects, batched.objects)


def test_split_groups_cuts_every_layer_into_consecutive_query_blocks():
    logits, boxes = torch.randn(2, 6, 4), torch.rand(2, 6, 4)
    layers = [SetPrediction(logits, boxes, logits[..., :3]), SetPrediction(logits + 1, boxes)]
    first, second, third = split_groups(layers, 3)
    torch.testing.assert_close(second[0].boxes, boxes[:, 2:4])
    torch.testing.assert_close(third[1].logits, logits[:, 4:6] + 1)
    torch.testing.assert_close(first[0].class_logits, logits[:, 0:2, :3])
    assert third[1].class_logits is None and split_groups(layers, 1) == [layers]
