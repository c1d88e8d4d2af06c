import itertools

import torch

from attnkit.detection.hungarian_matcher import MatchCost, hungarian_match, match_cost_matrix


def _brute_force(matrix: torch.Tensor) -> float:
    queries, objects = matrix.shape
    return min(sum(matrix[q, o].item() for o, q in enumerate(perm))
               for perm in itertools.permutations(range(queries), objects))


def test_obvious_assignment_on_a_hand_built_case():
    boxes = torch.tensor([[[0.8, 0.8, 0.2, 0.2], [0.5, 0.5, 0.1, 0.1], [0.2, 0.2, 0.2, 0.2]]])  # (1, 3 queries, 4)
    logits = torch.zeros(1, 3, 3)
    targets = [{"labels": torch.tensor([0, 1]), "boxes": torch.tensor([[0.2, 0.2, 0.2, 0.2], [0.8, 0.8, 0.2, 0.2]])}]
    match = hungarian_match(logits, boxes, targets)[0]
    order = match.objects.argsort()
    torch.testing.assert_close(match.queries[order], torch.tensor([2, 0]))
    torch.testing.assert_close(match.objects[order], torch.tensor([0, 1]))


def test_assignment_is_optimal_against_brute_force():
    torch.manual_seed(0)
    for objects in (1, 2, 4):
        logits = torch.randn(1, 5, 4)
        boxes = torch.rand(1, 5, 4) * 0.5 + 0.25
        target = {"labels": torch.randint(0, 3, (objects,)), "boxes": torch.rand(objects, 4) * 0.5 + 0.25}
        matrix = match_cost_matrix(logits[0], boxes[0], target["labels"], target["boxes"], MatchCost())
        match = hungarian_match(logits, boxes, [target])[0]
        assert len(match.queries) == objects and len(set(match.queries.tolist())) == objects
        total = matrix[match.queries, match.objects].sum().item()
        torch.testing.assert_close(total, _brute_force(matrix), rtol=0, atol=1e-5)


def test_cost_matrix_terms_against_hand_values():
    logits = torch.log(torch.tensor([[0.7, 0.2, 0.1]]))  # one query; p(class 0) = 0.7
    boxes = torch.tensor([[0.5, 0.5, 0.2, 0.2]])
    target = torch.tensor([[0.5, 0.5, 0.2, 0.4]])  # same centre, twice as tall: IoU = GIoU = 0.5, L1 = 0.2
    matrix = match_cost_matrix(logits, boxes, torch.tensor([0]), target, MatchCost())
    torch.testing.assert_close(matrix, torch.tensor([[5 * 0.2 - 0.7 - 2 * 0.5]]))


def test_batched_equals_per_image_and_empty_images():
    torch.manual_seed(1)
    logits, boxes = torch.randn(3, 6, 5), torch.rand(3, 6, 4) * 0.5 + 0.25
    targets = [{"labels": torch.tensor([1, 2, 0]), "boxes": torch.rand(3, 4) * 0.5 + 0.25},
               {"labels": torch.zeros(0, dtype=torch.int64), "boxes": torch.zeros(0, 4)},
               {"labels": torch.tensor([3]), "boxes": torch.rand(1, 4) * 0.5 + 0.25}]
    batched = hungarian_match(logits, boxes, targets)
    for i, target in enumerate(targets):
        single = hungarian_match(logits[i:i + 1], boxes[i:i + 1], [target])[0]
        torch.testing.assert_close(batched[i].queries, single.queries)
        torch.testing.assert_close(batched[i].objects, single.objects)
    assert len(batched[1].queries) == 0 and len(batched[1].objects) == 0
