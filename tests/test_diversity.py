"""Per-class sample diversity (`eval`'s `diversity`): the ratio of nearest-neighbour
distances by hand, per class and over all samples, and the one warning line of a collapsed
class."""

import logging

import numpy as np
import pytest

from stagegan.evaluation import builtin, realism

# Class a on a line: real at 10, 11, 13 (nearest others 1, 1, 2: mean 4/3), generated at
# 10, 12, 12.5 (2, 0.5, 0.5: mean 1). Class b: real (0, 0), (3, 4), (6, 8) (5 each),
# generated three times (1, 1) (0 each).
REAL = np.array([[10, 0], [11, 0], [13, 0], [0, 0], [3, 4], [6, 8]], float)
FAKE = np.array([[10, 0], [12, 0], [12.5, 0], [1, 1], [1, 1], [1, 1]], float)
LABELS = np.array([0, 0, 0, 1, 1, 1])


def test_nearest_distances_by_hand():
    np.testing.assert_allclose(realism.nearest_distances(REAL[:3]), [1, 1, 2])
    assert realism.diversity_ratio(REAL[:3], FAKE[:3]) == pytest.approx(1 / (4 / 3))


def test_per_class_diversity_by_hand():
    result = realism.sample_diversity(REAL, FAKE, LABELS, ["a", "b"])
    assert result["diversity/a"] == pytest.approx(0.75)
    assert result["diversity/b"] == 0.0
    assert result["diversity"] == pytest.approx(0.375)  # the mean over classes
    assert (result["diversity_worst"], result["diversity_worst_class"]) == (0.0, "b")


def test_without_classes_one_ratio_over_all_samples():
    # nearest others: real 1, 1, 2, 5, 5, 5 (mean 19/6); generated 2, 0.5, 0.5, 0, 0, 0 (1/2)
    result = realism.sample_diversity(REAL, FAKE)
    assert result == {"diversity": pytest.approx(3 / 19), "diversity_worst": pytest.approx(3 / 19)}


def test_no_value_for_a_lone_sample_or_real_images_all_alike():
    assert realism.diversity_ratio(REAL[:1], FAKE[:1]) is None
    assert realism.diversity_ratio(np.zeros((3, 2)), FAKE[:3]) is None
    result = realism.sample_diversity(REAL, FAKE, LABELS, ["a", "b", "c"])  # c has none
    assert result["diversity/c"] is None and result["diversity"] == pytest.approx(0.375)


def test_identical_samples_of_one_class_give_one_warning_naming_it(caplog):
    with caplog.at_level(logging.WARNING, logger="stagegan"):
        builtin.diversity(REAL, FAKE, LABELS, ["a", "b"])
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        "eval: class b has collapsed: its samples' nearest-neighbour distance is 0.00 of its "
        "real images' (diversity/b below 0.5)"
    ]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="stagegan"):
        builtin.diversity(REAL, FAKE)  # all samples: 3/19
    assert [r.getMessage() for r in caplog.records] == [
        "eval: the samples have collapsed: their nearest-neighbour distance is 0.16 of the "
        "real images' (diversity below 0.5)"
    ]


def test_varied_classes_give_no_warning_and_several_collapsed_ones_one_line(caplog):
    varied = FAKE.copy()
    varied[3:] = [[0, 1], [3, 3], [6, 9]]  # class b as varied as its real images, about
    with caplog.at_level(logging.WARNING, logger="stagegan"):
        builtin.diversity(REAL, varied, LABELS, ["a", "b"])
    assert caplog.records == []
    both = FAKE.copy()
    both[:3] = [[10, 0], [10, 0.12], [10, 0.24]]  # class a nearly alike too: 0.12 / (4 / 3)
    with caplog.at_level(logging.WARNING, logger="stagegan"):
        builtin.diversity(REAL, both, LABELS, ["a", "b"])
    (line,) = [r.getMessage() for r in caplog.records]
    assert line.startswith("eval: class b has collapsed") and line.endswith("; also a (0.09)")


def test_both_sets_count_the_same_points():
    # the first 3 generated points against the 3 real ones (the 4th would halve a distance)
    fake = np.array([[10, 0], [12, 0], [12.5, 0], [10.1, 0]])
    assert realism.diversity_ratio(REAL[:3], fake) == pytest.approx(0.75)
    assert realism.diversity_ratio(REAL[:3], FAKE[:3], most=2) == pytest.approx(2 / 1)
