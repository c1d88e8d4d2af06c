import torch
import torch.nn.functional as F

from attnkit.detection.output import DetectionOutput, SetPrediction
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
    losses = SetCriterion(num_classes=3)(DetectionOutput(logits, boxes), _targets())
    torch.testing.assert_close(losses["loss"], torch.tensor(0.0), atol=1e-5, rtol=0)
    torch.testing.assert_close(losses["cardinality_error"], torch.tensor(0.0))
    torch.testing.assert_close(losses["class_error"], torch.tensor(0.0))


def test_terms_against_a_reference_computation():
    torch.manual_seed(0)
    logits, boxes = torch.randn(2, 4, 4), torch.rand(2, 4, 4) * 0.4 + 0.3
    criterion = SetCriterion(num_classes=3, weights=LossWeights(no_object=0.1))
    losses = criterion(DetectionOutput(logits, boxes), _targets())
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
    outputs = DetectionOutput.from_layers([SetPrediction(logits, boxes) for logits, boxes in layers])
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


def test_layers_scored_as_one_batch_equal_each_scored_alone():
    from attnkit.detection.hungarian_matcher import hungarian_match

    torch.manual_seed(0)
    criterion = SetCriterion(num_classes=3)
    layers = [SetPrediction(torch.randn(2, 4, 4), torch.rand(2, 4, 4) * 0.4 + 0.3) for _ in range(3)]
    losses = criterion(DetectionOutput.from_layers(layers), _targets())
    alone = [criterion.set_terms([layer], _targets(), 2.0) for layer in layers]  # each (1,)
    for name in ("loss_ce", "loss_bbox", "loss_giou", "class_error"):
        torch.testing.assert_close(losses[name], alone[2][name][0])
        torch.testing.assert_close(losses[f"{name}_0"], alone[0][name][0])
        torch.testing.assert_close(losses[f"{name}_1"], alone[1][name][0])
    torch.testing.assert_close(losses["loss"], sum(criterion.weighted(terms) for terms in alone))
    stacked = hungarian_match(torch.cat([s.logits for s in layers]), torch.cat([s.boxes for s in layers]), _targets())
    for i, s in enumerate(layers):
        for one, batched in zip(hungarian_match(s.logits, s.boxes, _targets()), stacked[2 * i:2 * i + 2]):
            assert torch.equal(one.queries, batched.queries) and torch.equal(one.objects, batched.objects)


def test_a_given_assignment_is_scored_instead_of_the_optimal_one():
    from attnkit.detection.hungarian_matcher import Match

    torch.manual_seed(0)
    criterion = SetCriterion(num_classes=3)
    layer = SetPrediction(torch.randn(2, 4, 4), torch.rand(2, 4, 4) * 0.4 + 0.3)
    empty = torch.zeros(0, dtype=torch.int64)
    given = [Match(torch.tensor([3, 0]), torch.tensor([0, 1])), Match(empty, empty)]
    terms = criterion.terms(*criterion.stacked([layer, layer]), _targets(), given * 2, 2.0)  # no matching
    boxes = _targets()[0]["boxes"]
    expected_l1 = ((layer.boxes[0, 3] - boxes[0]).abs().sum() + (layer.boxes[0, 0] - boxes[1]).abs().sum()) / 2
    torch.testing.assert_close(terms["loss_bbox"], expected_l1.expand(2))
    classes = torch.full((2, 4), 3)
    classes[0, 3], classes[0, 0] = 0, 2
    expected_ce = F.cross_entropy(layer.logits.reshape(8, 4), classes.reshape(8), weight=torch.tensor([1, 1, 1, 0.1]))
    torch.testing.assert_close(terms["loss_ce"], expected_ce.expand(2))


def test_one_process_normalises_by_its_own_boxes_and_at_least_one():
    assert global_box_count(0, torch.device("cpu")) == 1.0
    assert global_box_count(7, torch.device("cpu")) == 7.0
