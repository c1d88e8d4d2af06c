import torch
import torch.nn.functional as F

from attnkit.detection.set_criterion import LossWeights, SetCriterion, cardinality_error, global_box_count


def _targets():
    return [{"labels": torch.tensor([0, 2]), "boxes": torch.tensor([[0.3, 0.3, 0.2, 0.2], [0.7, 0.6, 0.3, 0.2]])},
            {"labels": torch.zeros(0, dtype=torch.int64), "boxes": torch.zeros(0, 4)}]


def test_loss_is_near_zero_for_perfect_predictions():
    logits = torch.full((2, 4, 4), -20.0)
    logits[..., 3] = 20.0  # every query says "no object"...
    logits[0, 1] = torch.tensor([20.0, -20, -20, -20])  # ...except two, which are exactly right
    logits[0, 3] = torch.tensor([-20.0, -20, 20, -20])
    boxes = torch.full((2, 4, 4), 0.5)
    boxes[0, 1], boxes[0, 3] = _targets()[0]["boxes"]
    losses = SetCriterion(num_classes=3)({"pred_logits": logits, "pred_boxes": boxes}, _targets())
    torch.testing.assert_close(losses["loss"], torch.tensor(0.0), atol=1e-5, rtol=0)
    torch.testing.assert_close(losses["cardinality_error"], torch.tensor(0.0))
    torch.testing.assert_close(losses["class_error"], torch.tensor(0.0))


def test_terms_against_a_reference_computation():
    torch.manual_seed(0)
    logits, boxes = torch.randn(2, 4, 4), torch.rand(2, 4, 4) * 0.4 + 0.3
    criterion = SetCriterion(num_classes=3, weights=LossWeights(no_object=0.1))
    losses = criterion({"pred_logits": logits, "pred_boxes": boxes}, _targets())
    from attnkit.detection.hungarian_matcher import hungarian_match
    match = hungarian_match(logits, boxes, _targets())[0]
    classes = torch.full((2, 4), 3)
    classes[0, match.queries] = _targets()[0]["labels"][match.objects]
    expected_ce = F.cross_entropy(logits.reshape(8, 4), classes.reshape(8), weight=torch.tensor([1, 1, 1, 0.1]))
    torch.testing.assert_close(losses["loss_ce"], expected_ce)
    expected_l1 = (boxes[0, match.queries] - _targets()[0]["boxes"][match.objects]).abs().sum() / 2
    torch.testing.assert_close(losses["loss_bbox"], expected_l1)
    torch.testing.assert_close(losses["loss"], losses["loss_ce"] + 5 * losses["loss_bbox"] + 2 * losses["loss_giou"])


def test_auxiliary_outputs_are_added_and_receive_gradients():
    torch.manual_seed(0)
    layers = [(torch.randn(2, 4, 4, requires_grad=True), torch.rand(2, 4, 4).requires_grad_()) for _ in range(3)]
    outputs = {"pred_logits": layers[-1][0], "pred_boxes": layers[-1][1],
               "aux_outputs": [{"pred_logits": l, "pred_boxes": b} for l, b in layers[:-1]]}
    losses = SetCriterion(num_classes=3)(outputs, _targets())
    assert {"loss_ce_0", "loss_bbox_1", "loss_giou_1"} <= losses.keys()
    per_layer = sum(losses[f"loss_ce{s}"] + 5 * losses[f"loss_bbox{s}"] + 2 * losses[f"loss_giou{s}"]
                    for s in ("", "_0", "_1"))
    torch.testing.assert_close(losses["loss"], per_layer)
    losses["loss"].backward()
    for logits, boxes in layers:
        assert logits.grad.abs().sum() > 0 and boxes.grad.abs().sum() > 0


def test_cardinality_error_counts_predicted_objects():
    logits = torch.zeros(2, 3, 3)
    logits[0, :, 0] = 1.0  # image 0 predicts three objects, has two
    logits[1, :, 2] = 1.0  # image 1 predicts none, has none
    torch.testing.assert_close(cardinality_error(logits, _targets()), torch.tensor(0.5))


def test_layers_and_groups_scored_as_one_batch_equal_each_scored_alone():
    from attnkit.detection.hungarian_matcher import hungarian_match

    torch.manual_seed(0)
    criterion = SetCriterion(num_classes=3)
    sets = [{"pred_logits": torch.randn(2, 4, 4), "pred_boxes": torch.rand(2, 4, 4) * 0.4 + 0.3} for _ in range(6)]
    groups = [{**sets[g * 3 + 2], "aux_outputs": sets[g * 3:g * 3 + 2]} for g in range(2)]
    losses = criterion.group_losses(groups, _targets())
    alone = [criterion.layer_losses(s, _targets(), 2.0) for s in sets]
    for name in ("loss_ce", "loss_bbox", "loss_giou", "class_error"):
        torch.testing.assert_close(losses[name], alone[2][name])
        torch.testing.assert_close(losses[f"{name}_0"], alone[0][name])
    total = sum(criterion.weighted(terms) for terms in alone) / 2
    torch.testing.assert_close(losses["loss"], total)
    stacked = hungarian_match(torch.cat([s["pred_logits"] for s in sets]), torch.cat([s["pred_boxes"] for s in sets]),
                              _targets())
    for i, s in enumerate(sets):
        for one, batched in zip(hungarian_match(s["pred_logits"], s["pred_boxes"], _targets()), stacked[2 * i:2 * i + 2]):
            assert torch.equal(one.queries, batched.queries) and torch.equal(one.objects, batched.objects)


def test_one_process_normalises_by_its_own_boxes_and_at_least_one():
    assert global_box_count(0, torch.device("cpu")) == 1.0
    assert global_box_count(7, torch.device("cpu")) == 7.0
